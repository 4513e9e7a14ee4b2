"""The signing key kept in the data directory is made whole once and refused when short.

Found by an audit: the key file was created empty, then written, so a crash in between
left an empty ``signing.key``, which ``serve`` took as it was: it started, and every
``GET /v1/agent/events`` with a pending invocation answered 500 (PyJWT refuses an empty
HMAC key); a 3-byte file signed every invocation token. The file now holds at least
as many bytes as ``TURNKEEPER_SIGNING_KEY`` must (`MIN_SIGNING_KEY_BYTES`), or the
command stops before it touches the database with one line that names the file. It is
written aside and linked into place, so it exists whole or not at all, and processes
that start together take the first key made.
"""

from __future__ import annotations

import os
import stat
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from turnkeeper.adapters import cli, wiring
from turnkeeper.adapters.config import (
    ENV_SIGNING_KEY,
    MIN_SIGNING_KEY_BYTES,
    Config,
    ConfigError,
    load_config,
)
from turnkeeper.adapters.postgres.embedded import EMBEDDED_SUBDIR
from turnkeeper.adapters.wiring import SIGNING_KEY_FILE, signing_key

#: Processes (here threads) that make the key at the same moment.
RACERS = 16
#: Key files too short to sign with: empty (a crash after the create), short, blank.
SHORT_FILES = ["", "abc", "k" * (MIN_SIGNING_KEY_BYTES - 1), " \n\t\n"]
#: The commands that read the key, each refusing a short file alike.
KEY_COMMANDS = [
    ["serve"],
    ["serve", "--workers", "2"],
    ["jobs"],
    ["jobs", "--once"],
    ["demo-world"],
]


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A data directory of the process's configuration, no key or database configured."""
    for name in ("TURNKEEPER_DATABASE_URL", ENV_SIGNING_KEY, "TURNKEEPER_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    data = tmp_path / "data"
    monkeypatch.setenv("TURNKEEPER_DATA_DIR", str(data))
    return data


def _config(data_dir: Path) -> Config:
    return load_config({"TURNKEEPER_DATA_DIR": str(data_dir)})


def _refusal(path: Path, size: int) -> str:
    return (
        f"invalid configuration: signing key file {str(path)!r} must hold at least "
        f"{MIN_SIGNING_KEY_BYTES} bytes, got {size} (remove it to make a new key, or set "
        f"{ENV_SIGNING_KEY})"
    )


def test_a_missing_key_file_is_made_once_owner_only_and_kept(data_dir: Path) -> None:
    key = signing_key(_config(data_dir))
    path = data_dir / SIGNING_KEY_FILE
    assert len(key) >= MIN_SIGNING_KEY_BYTES
    assert path.read_bytes() == key
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert signing_key(_config(data_dir)) == key
    # Nothing but the key is left beside it (the file it was written to is gone).
    assert sorted(p.name for p in data_dir.iterdir()) == [SIGNING_KEY_FILE]


def test_a_key_file_of_the_minimum_length_is_used(data_dir: Path) -> None:
    data_dir.mkdir()
    key = "k" * MIN_SIGNING_KEY_BYTES
    (data_dir / SIGNING_KEY_FILE).write_text(f"  {key}\n", encoding="utf-8")
    assert signing_key(_config(data_dir)) == key.encode()


@pytest.mark.parametrize("text", SHORT_FILES, ids=["empty", "3-bytes", "31-bytes", "blank"])
def test_a_short_key_file_is_refused_naming_the_file_not_the_key(data_dir: Path, text: str) -> None:
    data_dir.mkdir()
    path = data_dir / SIGNING_KEY_FILE
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        signing_key(_config(data_dir))
    assert str(caught.value) == _refusal(path, len(text.strip()))
    assert path.read_text(encoding="utf-8") == text  # left for the operator to look at


def test_a_key_file_that_is_not_utf8_is_refused_naming_the_file(data_dir: Path) -> None:
    data_dir.mkdir()
    path = data_dir / SIGNING_KEY_FILE
    path.write_bytes(b"\xff" * (MIN_SIGNING_KEY_BYTES * 2))
    with pytest.raises(ConfigError) as caught:
        signing_key(_config(data_dir))
    assert str(caught.value) == (
        f"invalid configuration: signing key file {str(path)!r} cannot be read (not UTF-8)"
    )


def test_a_configured_key_leaves_the_key_file_alone(data_dir: Path) -> None:
    data_dir.mkdir()
    (data_dir / SIGNING_KEY_FILE).write_text("", encoding="utf-8")
    key = "c" * MIN_SIGNING_KEY_BYTES
    config = load_config({"TURNKEEPER_DATA_DIR": str(data_dir), ENV_SIGNING_KEY: key})
    assert signing_key(config) == key.encode()


def test_a_write_cut_short_leaves_no_key_file(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What a crash between the create and the write left before: an empty key file.
    def crash(descriptor: int) -> None:
        raise OSError(5, "Input/output error")

    with monkeypatch.context() as patched:
        patched.setattr(os, "fsync", crash)
        with pytest.raises(ConfigError, match="TURNKEEPER_DATA_DIR cannot hold the signing key"):
            signing_key(_config(data_dir))
    assert list(data_dir.iterdir()) == []
    # The next start makes a whole key.
    assert len(signing_key(_config(data_dir))) >= MIN_SIGNING_KEY_BYTES


def test_first_starts_at_the_same_moment_make_one_key(data_dir: Path) -> None:
    start = threading.Barrier(RACERS)
    config = _config(data_dir)

    def first_start() -> bytes:
        start.wait()
        return signing_key(config)

    with ThreadPoolExecutor(RACERS) as pool:
        keys = list(pool.map(lambda _: first_start(), range(RACERS)))
    assert set(keys) == {(data_dir / SIGNING_KEY_FILE).read_bytes()}
    assert sorted(p.name for p in data_dir.iterdir()) == [SIGNING_KEY_FILE]


def test_a_key_file_is_never_replaced(data_dir: Path) -> None:
    # Another process linked its key between this one's check and its link.
    data_dir.mkdir()
    path = data_dir / SIGNING_KEY_FILE
    theirs = "t" * (MIN_SIGNING_KEY_BYTES * 2)
    path.write_text(theirs, encoding="utf-8")
    wiring._write_secret(path, "m" * (MIN_SIGNING_KEY_BYTES * 2))
    assert path.read_text(encoding="utf-8") == theirs
    assert sorted(p.name for p in data_dir.iterdir()) == [SIGNING_KEY_FILE]


@pytest.mark.parametrize("command", KEY_COMMANDS, ids=" ".join)
@pytest.mark.parametrize("text", ["", "abc"], ids=["empty", "3-bytes"])
def test_every_command_that_reads_the_key_refuses_a_short_file_before_the_database(
    data_dir: Path, command: list[str], text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir.mkdir()
    path = data_dir / SIGNING_KEY_FILE
    path.write_text(text, encoding="utf-8")
    assert cli.main([*command, "--port", "0"] if command[0] == "serve" else command) == 2
    assert capsys.readouterr().err.splitlines() == [f"turnkeeper: {_refusal(path, len(text))}"]
    # The embedded server was not started: its folder was never made.
    assert not (data_dir / EMBEDDED_SUBDIR).exists()


def test_a_data_dir_that_cannot_hold_the_key_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("TURNKEEPER_DATABASE_URL", raising=False)
    monkeypatch.delenv(ENV_SIGNING_KEY, raising=False)
    data_file = tmp_path / "data"
    data_file.write_text("not a directory\n")
    monkeypatch.setenv("TURNKEEPER_DATA_DIR", str(data_file))
    assert cli.main(["demo-world"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("turnkeeper: invalid configuration: TURNKEEPER_DATA_DIR cannot hold ")
    assert data_file.read_text() == "not a directory\n"
    assert os.listdir(tmp_path) == ["data"]
