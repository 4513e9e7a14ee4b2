"""The JSON log lines a test causes, captured as ``turnkeeper serve`` would write them.

`captured_json_log` configures turnkeeper's JSON logging onto a string stream for the
length of a ``with`` block and undoes it afterwards (a test module's ``log_lines``
fixture yields from it); `json_records` parses the lines written to that stream, and
`file_records` the records among a server process's output file.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import structlog

from turnkeeper.adapters.logging import configure_logging


@contextlib.contextmanager
def captured_json_log() -> Iterator[io.StringIO]:
    """A stream that receives the JSON log lines until the block ends."""
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    stream = io.StringIO()
    configure_logging(json=True, stream=stream)
    try:
        yield stream
    finally:
        # The next test must not write to this test's stream, or in its format.
        structlog.reset_defaults()
        root.handlers[:], root.level = saved


def json_records(stream: io.StringIO) -> list[dict[str, Any]]:
    """Each non-blank line written to `stream`, parsed."""
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


def file_records(output: Path) -> list[dict[str, Any]]:
    """The JSON log records among a server process's output file.

    The file also holds what the server prints (its owner, as indented JSON): lines that
    are not a JSON object are skipped.
    """
    found = []
    for line in output.read_text().splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict):
                found.append(record)
    return found
