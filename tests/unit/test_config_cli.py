"""Invalid configuration stops every command with one line and exit 2, touching nothing.

docs/configuration.md: the process prints one line that starts with ``invalid
configuration:`` and names the key, and exits with code 2, before it touches the
database. The database URL names a port where nothing listens, so that a command that
went on would fail otherwise (exit 1) rather than reach a database.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from turnkeeper.adapters import cli

#: Nothing listens on port 1 of the loopback: a command that got that far fails fast.
UNREACHABLE_DATABASE = "postgresql://turnkeeper@127.0.0.1:1/turnkeeper"


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("TURNKEEPER_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("TURNKEEPER_DATABASE_URL", UNREACHABLE_DATABASE)
    monkeypatch.setenv("TURNKEEPER_DATA_DIR", str(tmp_path / "data"))


@pytest.mark.parametrize(
    ("variable", "value", "start"),
    [
        ("TURNKEEPER_JOBS__INTERVAL", "99999999999999999999", "jobs.interval must be at most"),
        ("TURNKEEPER_DATABASE__POOL_MIN_SIZE", "20", "database.pool_min_size must not exceed"),
        ("TURNKEEPER_MCP__CHUNK_BYTES", "3", "mcp.chunk_bytes must be an integer of 4 or more"),
        ("TURNKEEPER_DATABASE__TX_RETRY_MAX", "1_000", "database.tx_retry_max must be"),
        ("TURNKEEPER_METRICS__ENABLED", "TRUE", "metrics.enabled must be true, false"),
        ("TURNKEEPER_HTTP__PARSER", "httptools", "http.parser is httptools"),
        ("TURNKEEPER_SIGNING_KEY", "abc", "TURNKEEPER_SIGNING_KEY must be at least"),
    ],
)
def test_a_command_refuses_invalid_configuration_in_one_line(
    variable: str,
    value: str,
    start: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(variable, value)
    # httptools is installed here; None in sys.modules is how a missing module looks.
    monkeypatch.setitem(sys.modules, "httptools", None)
    assert cli.main(["migrate"]) == cli.EXIT_USAGE
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"turnkeeper: invalid configuration: {start}")


def test_a_config_file_that_is_not_utf8_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "c.toml"
    path.write_bytes(b"\xff\xfe")
    monkeypatch.setenv("TURNKEEPER_CONFIG", str(path))
    assert cli.main(["migrate"]) == cli.EXIT_USAGE
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("turnkeeper: invalid configuration: TURNKEEPER_CONFIG file ")
    assert "is not valid TOML" in lines[0]
