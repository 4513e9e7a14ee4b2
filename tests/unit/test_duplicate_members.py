"""Duplicated members are found by a quick pass, and named as the full parse names them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnkeeper.adapters.http.decoding import duplicate_member, pointer, refuse_duplicate_body
from turnkeeper.domain.errors import ValidationFailed


class _Pairs(list[tuple[str, Any]]):
    """A decoded object as the list of its members, repeated names kept."""


def _reference(body: bytes) -> str | None:
    """The pointer of the first duplicate, the way the guard named it before (json.loads)."""
    try:
        decoded = json.loads(body, object_pairs_hook=_Pairs)
    except (ValueError, RecursionError):
        return None
    return _first(decoded, ())


def _first(value: Any, path: tuple[str | int, ...]) -> str | None:
    if isinstance(value, _Pairs):
        seen: set[str] = set()
        for name, _ in value:
            if name in seen:
                return pointer((*path, name))
            seen.add(name)
        for name, member in dict(value).items():
            found = _first(member, (*path, name))
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _first(item, (*path, index))
            if found is not None:
                return found
    return None


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"client_msg_id": "a", "content": "one"}', None),
        (b'{"client_msg_id": "a", "content": "one", "content": "two"}', "/content"),
        (b'{"first_message": {"content": "x", "content": "y"}}', "/first_message/content"),
        # The same name in two objects is no duplicate.
        (b'{"a": {"n": 1}, "b": {"n": 2}}', None),
        # An object's own duplicate is named before one nested in an earlier member.
        (b'{"a": {"n": 1, "n": 2}, "z": 1, "z": 2}', "/z"),
        (b'[{"x": 1}, {"y": 1, "y": 1}]', "/1/y"),
        # An escaped name is the same name.
        (b'{"ab": 1, "a\\u0062": 2}', "/ab"),
        # Not JSON at all, or broken after its duplicate: the typed decoder answers it.
        (b'{"a": 1, "a": 2', None),
        (b"nope", None),
        (b"", None),
        (b"\xff\xfe\xff", None),
        ('{"a": 1, "a": 2}'.encode("utf-16"), "/a"),
        ('{"a": 1, "a": 2}'.encode("utf-8-sig"), "/a"),
    ],
)
def test_the_first_duplicated_member_is_named(body: bytes, expected: str | None) -> None:
    assert duplicate_member(body) == expected
    assert _reference(body) == expected


def test_a_duplicated_member_is_refused_and_a_plain_body_passes() -> None:
    refuse_duplicate_body(b'{"content": "one"}')
    with pytest.raises(ValidationFailed) as refused:
        refuse_duplicate_body(b'{"content": "one", "content": "two"}')
    assert [(e.pointer, e.code) for e in refused.value.errors] == [("/content", "duplicate_member")]


# Member names as JSON text: "\u0061" is "a" written with an escape.
names = st.sampled_from(['"a"', '"b"', '"c~/"', '"q\\""', '"\\u0061"'])
scalars = st.sampled_from(["1", "null", '"x"', '"a\\"b"', "[]", "{}"])


def _object(members: list[tuple[str, str]]) -> str:
    return "{" + ", ".join(f"{name}: {value}" for name, value in members) + "}"


texts = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3).map(lambda items: "[" + ", ".join(items) + "]")
        | st.lists(st.tuples(names, inner), max_size=4).map(_object)
    ),
    max_leaves=12,
)


@given(texts, st.sampled_from(["utf-8", "utf-16", "utf-8-sig"]), st.sampled_from(["", " x"]))
def test_the_quick_pass_agrees_with_the_full_parse(text: str, encoding: str, tail: str) -> None:
    body = (text + tail).encode(encoding)
    assert duplicate_member(body) == _reference(body)
