"""Without the embedded extra and without a database URL, the commands say how to get one."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path
from typing import NoReturn

import pytest

from turnkeeper.adapters import cli
from turnkeeper.adapters.config import load_config
from turnkeeper.adapters.postgres import embedded


@pytest.mark.parametrize(
    "command",
    [["serve"], ["serve", "--demo"], ["migrate"], ["jobs", "--once"], ["check"], ["demo-world"]],
)
def test_a_database_command_without_any_database_exits_2_with_one_line(
    command: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    monkeypatch.delenv("TURNKEEPER_DATABASE_URL", raising=False)
    monkeypatch.setenv("TURNKEEPER_DATA_DIR", str(tmp_path))
    monkeypatch.setattr(embedded, "embedded_available", lambda: False)

    code = cli.main(command)

    lines = capsys.readouterr().err.strip().splitlines()
    assert code == cli.EXIT_USAGE == 2
    assert len(lines) == 1
    assert "TURNKEEPER_DATABASE_URL" in lines[0]
    assert "pip install 'turnkeeper[embedded]'" in lines[0]
    # A refused command leaves nothing behind: no empty pgdata/, no signing.key.
    assert list(tmp_path.iterdir()) == []


def test_the_extra_is_found_when_installed() -> None:
    # The test environment installs the dev extra, which includes embedded.
    assert embedded.embedded_available()


@pytest.mark.parametrize(
    "environ", [{}, {"TURNKEEPER_DATA_DIR": "/srv/turnkeeper-example.com"}], ids=["cwd", "env"]
)
def test_the_embedded_server_default_is_the_command_lines_folder(
    environ: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # One data directory, one cluster: EmbeddedPostgres.start() finds serve's database.
    monkeypatch.delenv("TURNKEEPER_DATA_DIR", raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    served = load_config().data_dir / embedded.EMBEDDED_SUBDIR
    assert embedded.default_data_dir(environ) == served.absolute()


@pytest.mark.parametrize("command", [["migrate"], ["check"], ["jobs", "--once"]])
def test_a_data_dir_whose_database_cannot_be_written_is_one_line(
    command: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    # A data directory that holds a database already, mounted read-only: its folder
    # exists, so making it succeeds, and the server failed to start with no reason given.
    monkeypatch.delenv("TURNKEEPER_DATABASE_URL", raising=False)
    monkeypatch.setenv("TURNKEEPER_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("TURNKEEPER_SIGNING_KEY", "k" * 32)
    (tmp_path / embedded.EMBEDDED_SUBDIR).mkdir()

    def read_only(*args: object, **kwargs: object) -> NoReturn:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    def never(*args: object, **kwargs: object) -> NoReturn:
        raise AssertionError("the embedded server must not be started")

    monkeypatch.setattr(tempfile, "TemporaryFile", read_only)
    monkeypatch.setattr(embedded.EmbeddedPostgres, "start", never)

    code = cli.main(command)

    (line,) = capsys.readouterr().err.splitlines()
    assert code == cli.EXIT_USAGE
    folder = tmp_path / embedded.EMBEDDED_SUBDIR
    assert line == (
        "turnkeeper: invalid configuration: TURNKEEPER_DATA_DIR cannot hold the embedded"
        f" database ({folder}): Read-only file system"
    )
