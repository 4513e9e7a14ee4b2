"""The body checks before decoding: nesting depth and NUL characters."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnkeeper.adapters.http.body_guard import nul_member, too_deep


@pytest.mark.parametrize(
    ("body", "depth", "expected"),
    [
        (b'{"content": "hallo"}', 1, None),
        (b'{"content": []}', 1, "/content"),
        (b'{"content": [[]]}', 3, None),
        (b'{"content": [[[]]]}', 3, "/content"),
        (b"[[[[]]]]", 3, ""),
        (b'{"a": 1, "b": {"c": {"d": {}}}}', 3, "/b"),
        (b'{"a": "x", "b~/c": [[[]]]}', 3, "/b~0~1c"),
        # Brackets and escaped quotes inside strings are text, not nesting.
        (b'{"content": "[[[[{{{{ \\" [[[[", "x": []}', 3, None),
        (b'{"content": "\\\\", "y": [[[]]]}', 3, "/y"),
        # Not JSON at all: the typed decoder answers it.
        (b"]]]]]]] [", 3, None),
        (b"", 1, None),
        (b"\xff\xfe[[[[", 3, ""),
    ],
)
def test_the_depth_scan_names_the_top_level_member(
    body: bytes, depth: int, expected: str | None
) -> None:
    assert too_deep(body, depth) == expected


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


documents = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ab\x00'),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(alphabet='[]{}"\\ab', max_size=4), inner, max_size=3)
    ),
    max_leaves=12,
)


@given(documents, st.integers(min_value=1, max_value=6))
def test_the_depth_scan_agrees_with_the_decoded_document(document: Any, limit: int) -> None:
    body = json.dumps(document).encode()
    assert (too_deep(body, limit) is not None) == (_depth(document) > limit)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"content": "hallo"}', None),
        (b'{"content": "hal\\u0000lo"}', "/content"),
        (
            b'{"first_message": {"client_msg_id": "a", "content": "\\u0000"}}',
            "/first_message/content",
        ),
        (b'{"mentions": ["a", "b\\u0000"]}', "/mentions/1"),
        # An escaped backslash before u0000 is the text \\u0000, not a NUL.
        (b'{"content": "\\\\u0000"}', None),
        (b'{"content": "\\u0000', None),  # no JSON: the typed decoder answers it
    ],
)
def test_the_first_nul_is_named_by_its_pointer(body: bytes, expected: str | None) -> None:
    assert nul_member(body) == expected
