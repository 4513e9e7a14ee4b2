"""The JSON format's renderer writes the line structlog's `JSONRenderer` writes.

`render_json` encodes plain records with msgspec for their cost per line (ADR 0028,
second amendment) and leaves every other record to structlog's renderer
(``json.dumps``): readers and tests of the log see the same text either way.
"""

from __future__ import annotations

import datetime
import io
import json
import logging
import uuid

import pytest
import structlog
from hypothesis import given
from hypothesis import strategies as st

from turnkeeper.adapters.logging import configure_logging, render_json

pytestmark = pytest.mark.usefixtures("restored_logging")

_structlog_json = structlog.processors.JSONRenderer()

_scalars = (
    st.text()
    | st.integers()
    | st.floats()
    | st.floats(min_value=-1e6, max_value=1e6)
    | st.booleans()
    | st.none()
)
_values = st.recursive(
    _scalars | st.uuids() | st.datetimes(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


class _Own:
    """A value with its own log form, as structlog's renderer honours it."""

    def __structlog__(self) -> str:
        return "own form"


@given(
    st.dictionaries(
        # Lone surrogates too: an embedding program can pass them (Python strings hold them).
        st.text(st.characters(codec=None, exclude_categories=())),
        _values
        | st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF, exclude_categories=())),
        max_size=8,
    )
)
def test_every_record_renders_as_structlog_renders_it(record: dict[str, object]) -> None:
    assert render_json(None, "info", dict(record)) == _structlog_json(None, "info", dict(record))


@pytest.mark.parametrize(
    "record",
    [
        {"event": "http_request", "method": "POST", "status": 201, "duration_ms": 1.25},
        {"event": "x", "ratio": 0.0001, "big": 2**70, "none": None, "yes": True},
        {"event": "x", "text": "Grüße an Robin"},
        {"event": "x", "ratio": 1e-05},
        {"event": "x", "ratio": float("nan")},
        {"event": "x", "run": uuid.UUID(int=1)},
        {"event": "x", "at": datetime.datetime(2026, 12, 5, 8, 0, tzinfo=datetime.UTC)},
        {"event": "x", "own": _Own()},
        {"event": "x", "nested": {"kept": (1, 2)}},
        {"event": "x", "client_message_id": "a\ud800"},
    ],
    ids=[
        "plain",
        "numbers",
        "non-ascii",
        "exponent",
        "nan",
        "uuid",
        "datetime",
        "own",
        "nested",
        "lone surrogate",
    ],
)
def test_each_kind_of_record_renders_as_structlog_renders_it(record: dict[str, object]) -> None:
    line = render_json(None, "info", dict(record))
    assert line == _structlog_json(None, "info", dict(record))
    assert "\n" not in line


def test_the_configured_json_format_renders_with_it() -> None:
    stream = io.StringIO()
    configure_logging(json=True, stream=stream)
    structlog.get_logger("turnkeeper.test").info("run_opened", seq=2, ratio=0.5)
    logging.getLogger("uvicorn.error").info("started %s", "here")
    mine, foreign = stream.getvalue().splitlines()
    assert '"event": "run_opened", ' in mine
    assert (json.loads(mine)["seq"], json.loads(foreign)["event"]) == (2, "started here")
