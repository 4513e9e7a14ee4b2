"""The command line keeps to its exit codes and its one line on standard error.

2 for what the caller wrote wrong (a port out of range, a malformed database URL, a data
directory that is a file, a malformed server URL of ``turnkeeper mcp``); 1 with one line
for an address that cannot be listened on, found before anything is started. uvicorn's
own exit code (3) never leaks out.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from turnkeeper.adapters import cli
from turnkeeper.adapters.mcp.command import ENV_AGENT_TOKEN, ENV_URL

#: An address of TEST-NET-1 (RFC 5737): never local, so binding it fails at once.
NOT_LOCAL = "192.0.2.1"


@pytest.fixture(autouse=True)
def _mcp_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_URL, "http://turnkeeper.example.com")
    monkeypatch.setenv(ENV_AGENT_TOKEN, "tk_example")
    monkeypatch.delenv("TURNKEEPER_DATABASE_URL", raising=False)


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize(
    "argv",
    [
        ["serve", "--port", "70000"],
        ["serve", "--port", "-1"],
        ["serve", "--port", "eighty"],
        ["mcp", "--http", "--port", "65536"],
        ["mcp", "--metrics-port", "-1"],
    ],
)
def test_a_port_out_of_range_is_bad_usage(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == cli.EXIT_USAGE
    assert "expected a port from 0 to 65535" in _one_line(capsys)


@pytest.mark.parametrize(
    "argv",
    [
        ["serve", "--memory", "--port", "{port}"],
        ["mcp", "--http", "--port", "{port}"],
        ["mcp", "--metrics-port", "{port}"],
    ],
)
def test_a_taken_port_is_one_line_and_exit_1(
    argv: list[str], taken_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main([part.format(port=taken_port) for part in argv])
    line = _one_line(capsys)
    assert code == cli.EXIT_FAILURE
    assert line.startswith("turnkeeper: cannot ")
    assert f"127.0.0.1:{taken_port}" in line
    assert "in use" in line


@pytest.mark.parametrize("command", ["serve --memory", "mcp --http"])
def test_a_host_that_is_not_local_is_one_line_and_exit_1(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main([*command.split(), "--host", NOT_LOCAL, "--port", "0"])
    line = _one_line(capsys)
    assert code == cli.EXIT_FAILURE
    assert line.startswith(f"turnkeeper: cannot listen on {NOT_LOCAL}:0: ")


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://alex:s3cret-pw@[::1",
        "host=db.example.com password=s3cret-pw colour=blue",
        "not a connection string s3cret-pw",
    ],
)
def test_a_malformed_database_url_is_bad_configuration_and_not_echoed(
    url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TURNKEEPER_DATABASE_URL", url)
    assert cli.main(["migrate"]) == cli.EXIT_USAGE
    line = _one_line(capsys)
    assert "TURNKEEPER_DATABASE_URL" in line
    assert "s3cret-pw" not in line


def test_a_data_dir_that_is_a_file_is_bad_configuration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data_file = tmp_path / "turnkeeper-data"
    data_file.write_text("not a directory\n")
    monkeypatch.setenv("TURNKEEPER_DATA_DIR", str(data_file))
    assert cli.main(["migrate"]) == cli.EXIT_USAGE
    line = _one_line(capsys)
    assert line.startswith("turnkeeper: invalid configuration: TURNKEEPER_DATA_DIR")
    assert data_file.read_text() == "not a directory\n"


@pytest.mark.parametrize(
    "url",
    [
        "http://[::1",
        "http://",
        "http://exa mple.com",
        "https://turnkeeper.example.com:99999",
        "ftp://turnkeeper.example.com",
        "turnkeeper.example.com",
    ],
)
def test_a_malformed_server_url_stops_mcp_at_once(
    url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(ENV_URL, url)
    assert cli.main(["mcp"]) == cli.EXIT_USAGE
    assert ENV_URL in _one_line(capsys)


@pytest.mark.parametrize(
    "url",
    [
        "http://turnkeeper.example.com",
        "https://turnkeeper.example.com:8443/base",
        "http://127.0.0.1:8000",
        "http://[::1]:8000",
        "http://localhost",
    ],
)
def test_well_formed_server_urls_are_taken(url: str) -> None:
    from turnkeeper.adapters.mcp.command import server_url

    assert server_url(f" {url} ") == url
