"""An embedding program decides where turnkeeper's records go, not turnkeeper.

Until the program configures structlog, turnkeeper's records go to the standard library
logger of their name: silent at info by default, and a program's own logging
configuration shows them where it writes. structlog's default would print every record
to standard output, into a program that may speak a protocol there (an agent runtime on
stdio). Each case runs in a fresh interpreter: structlog's configuration is global.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "embedding.py"
#: Seconds the example may take in its own interpreter.
RUN_TIMEOUT_SECONDS = 120
#: Runs the memory half of the example after the program's own logging set-up.
PROGRAM = """
import asyncio, importlib.util, logging, sys
{setup}
spec = importlib.util.spec_from_file_location("example", {path!r})
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
asyncio.run(module.on_memory())
"""


def _run(setup: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROGRAM.format(setup=setup, path=str(EXAMPLE))],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_SECONDS,
        check=True,
    )


def test_an_unconfigured_program_gets_no_record_on_stdout() -> None:
    done = _run("")
    assert "message 1 stored" in done.stdout
    assert "run_opened" not in done.stdout
    assert "run_opened" not in done.stderr


def test_the_programs_logging_configuration_shows_the_records() -> None:
    done = _run("logging.basicConfig(level=logging.INFO, stream=sys.stderr)")
    assert "run_opened" not in done.stdout
    (line,) = [line for line in done.stderr.splitlines() if "run_opened" in line]
    assert "turnkeeper.runs" in line
    assert "run_id=" in line


def test_a_program_silencing_turnkeeper_silences_it() -> None:
    done = _run(
        "logging.basicConfig(level=logging.INFO, stream=sys.stderr)\n"
        "logging.getLogger('turnkeeper').setLevel(logging.CRITICAL)"
    )
    assert "run_opened" not in done.stdout + done.stderr


#: A warning of the library in a program without any logging set-up.
WARNING_PROGRAM = """
from turnkeeper.application.logs import get_logger
get_logger("turnkeeper.client").warning("agent_send_failed", status=409)
"""


def test_an_unconfigured_program_gets_no_warning_on_stderr_either() -> None:
    # Found by an audit: without a handler of the program's, the standard library's last
    # resort printed the library's warnings (agent_send_failed) to standard error.
    done = subprocess.run(
        [sys.executable, "-c", WARNING_PROGRAM],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_SECONDS,
        check=True,
    )
    assert (done.stdout, done.stderr) == ("", "")
    shown = subprocess.run(
        [sys.executable, "-c", "import logging; logging.basicConfig()\n" + WARNING_PROGRAM],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_SECONDS,
        check=True,
    )
    assert "agent_send_failed" in shown.stderr
