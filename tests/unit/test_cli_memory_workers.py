"""``serve --memory`` takes one process: each source of a worker count is named when it conflicts.

Found by an audit: ``http.workers`` of 2 from the environment or the configuration file
with ``--memory`` was refused as a command-line error about ``--workers``, a flag the
caller never wrote, and the line named neither the key nor the variable. ``--workers``
keeps the command-line error; ``http.workers`` is invalid configuration, one line that
names the key (docs/configuration.md), like every other configuration error.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from turnkeeper.adapters import cli

#: The line of a worker count above 1 from the environment or the file.
CONFIG_LINE = (
    "turnkeeper: invalid configuration: http.workers must be 1 with --memory "
    "(one store per process), got 2"
)
#: The line of ``--workers 2``.
USAGE_LINE = "turnkeeper: error: --memory serves from one process, not --workers"


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TURNKEEPER_HTTP__WORKERS", "TURNKEEPER_CONFIG", "TURNKEEPER_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)


def _serve_memory(capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, list[str]]:
    code = cli.main(["serve", "--memory", "--port", "0", *extra])
    return code, capsys.readouterr().err.splitlines()


def test_workers_on_the_command_line_are_a_command_line_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _serve_memory(capsys, "--workers", "2") == (cli.EXIT_USAGE, [USAGE_LINE])


def test_workers_from_the_environment_are_invalid_configuration_naming_the_key(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TURNKEEPER_HTTP__WORKERS", "2")
    assert _serve_memory(capsys) == (cli.EXIT_USAGE, [CONFIG_LINE])


def test_workers_from_the_file_are_invalid_configuration_naming_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config_file = tmp_path / "turnkeeper.toml"
    config_file.write_text("[http]\nworkers = 2\n", encoding="utf-8")
    monkeypatch.setenv("TURNKEEPER_CONFIG", str(config_file))
    assert _serve_memory(capsys) == (cli.EXIT_USAGE, [CONFIG_LINE])


def test_workers_on_the_command_line_win_over_the_configuration(
    taken_port: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # --workers 1 overrides http.workers: the command gets as far as binding its port.
    monkeypatch.setenv("TURNKEEPER_HTTP__WORKERS", "2")
    code = cli.main(["serve", "--memory", "--workers", "1", "--port", str(taken_port)])
    (line,) = capsys.readouterr().err.splitlines()
    assert code == cli.EXIT_FAILURE
    assert line.startswith(f"turnkeeper: cannot listen on 127.0.0.1:{taken_port}: ")


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        # Above the bound of every count (http.workers refuses it from the environment).
        ("--workers", "2147483648"),
        ("--workers", "99999999999999"),
        ("--workers", "0"),
        # Written as the environment's values are: ASCII digits, no sign, no spaces.
        ("--workers", "+2"),
        ("--workers", " 2"),
        ("--workers", "1_0"),
        ("--workers", "\N{ARABIC-INDIC DIGIT TWO}"),
        ("--port", "\N{ARABIC-INDIC DIGIT EIGHT}\N{ARABIC-INDIC DIGIT TWO}"),
        ("--port", "+80"),
    ],
)
def test_a_flag_beyond_its_key_s_range_or_not_in_ascii_digits_is_refused(
    capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    # With --workers 2 the command is refused after parsing even if the value passed:
    # a test of a value parsed wrongly ends instead of serving.
    guard = ["--workers", "2"] if flag != "--workers" else []
    assert cli.main(["serve", "--memory", flag, value, *guard]) == cli.EXIT_USAGE
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"turnkeeper: error: argument {flag}: ")
    assert repr(value) in line
