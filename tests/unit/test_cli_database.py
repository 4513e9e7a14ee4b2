"""Without the embedded extra and without a database URL, the commands say how to get one."""

from __future__ import annotations

import pytest

from turnkeeper.adapters import cli
from turnkeeper.adapters.postgres import embedded


@pytest.mark.parametrize("command", [["serve"], ["migrate"], ["jobs", "--once"], ["check"]])
def test_a_database_command_without_any_database_exits_2_with_one_line(
    command: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: object,
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


def test_the_extra_is_found_when_installed() -> None:
    # The test environment installs the dev extra, which includes embedded.
    assert embedded.embedded_available()
