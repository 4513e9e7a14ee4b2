"""Strict body types and JSON media types, without a server (issue 16 item 8)."""

from __future__ import annotations

import pytest

from turnkeeper.adapters.http.body_guard import is_json_media_type
from turnkeeper.adapters.http.decoding import loose_member
from turnkeeper.adapters.http.requests import AckBody, AgentConfigUpdate, RunPatch
from turnkeeper.domain.errors import FieldError


@pytest.mark.parametrize(
    ("content_type", "expected"),
    [
        (None, True),
        ("application/json", True),
        ("Application/JSON; charset=utf-8", True),
        ("application/problem+json", True),
        ("application/merge-patch+json", True),
        ("text/plain", False),
        ("text/plain; charset=utf-8", False),
        ("application/x-www-form-urlencoded", False),
        ("multipart/form-data; boundary=x", False),
        ("application/jsonp", False),
        ("+json", False),
        ("", False),
    ],
)
def test_json_media_types(content_type: str | None, expected: bool) -> None:
    assert is_json_media_type(content_type) is expected


@pytest.mark.parametrize(
    ("body", "kind", "expected"),
    [
        (b'{"through_seq": 1}', AckBody, None),
        (b'{"through_seq": "1"}', AckBody, FieldError(pointer="/through_seq", code="invalid_type")),
        (b'{"through_seq": 1.0}', AckBody, FieldError(pointer="/through_seq", code="invalid_type")),
        (b'{"enabled": false}', AgentConfigUpdate, None),
        (b'{"enabled": "false"}', AgentConfigUpdate,
         FieldError(pointer="/enabled", code="invalid_type")),
        (b'{"enabled": 0}', AgentConfigUpdate,
         FieldError(pointer="/enabled", code="invalid_type")),
        (b'{"base_version": 1, "ops": [{"op": "replace", "path": "/followups/x/state",'
         b' "value": "absorbed"}]}', RunPatch, None),
        (b'{"base_version": "1", "ops": []}', RunPatch,
         FieldError(pointer="/base_version", code="invalid_type")),
        # Failures of other kinds are left to the typed decoder (its answer is unchanged).
        (b'{"through_seq": "x"}', AckBody, None),
        # A member named wrongly is named here, as the typed decoder would name it: a
        # huge number in it would fail Litestar's untyped decode first (malformed_json).
        (
            b'{"through_seq": 1, "extra": 2}',
            AckBody,
            FieldError(pointer="/extra", code="unknown_member"),
        ),
        (b'{"extra": 1e400}', AckBody, FieldError(pointer="/extra", code="unknown_member")),
        (b"{}", AckBody, FieldError(pointer="/through_seq", code="required")),
        (b'{"through_seq": ', AckBody, None),
        (b"", AckBody, None),
    ],
)  # fmt: skip
def test_loose_member(body: bytes, kind: type, expected: FieldError | None) -> None:
    assert loose_member(body, kind) == expected
