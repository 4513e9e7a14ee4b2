"""Request body checks that the typed decoder cannot make: duplicated JSON members.

msgspec, like most JSON decoders, keeps the last of two members with the same name. A
body with a duplicated member is ambiguous (two parsers may read different values from
it), so it is refused before decoding with ``400 validation_failed`` and the pointer of
the member, code ``duplicate_member``.
"""

from __future__ import annotations

import json
from typing import Any

from litestar import Request

from turnkeeper.domain.errors import FieldError, ValidationFailed

_METHODS_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})


class _Members(dict[str, Any]):
    """A decoded JSON object that remembers its duplicated member names."""

    duplicates: list[str]


def _object(pairs: list[tuple[str, Any]]) -> _Members:
    members = _Members()
    members.duplicates = []
    for name, value in pairs:
        if name in members:
            members.duplicates.append(name)
        members[name] = value
    return members


def pointer_token(name: str) -> str:
    """A member name as one reference token of a JSON pointer (RFC 6901).

    Args:
        name: the member name.

    Returns:
        The name with ``~`` written ``~0`` and ``/`` written ``~1``.
    """
    return name.replace("~", "~0").replace("/", "~1")


def _first_duplicate(value: Any, pointer: str) -> str | None:
    if isinstance(value, _Members):
        if value.duplicates:
            return f"{pointer}/{pointer_token(value.duplicates[0])}"
        for name, member in value.items():
            found = _first_duplicate(member, f"{pointer}/{pointer_token(name)}")
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _first_duplicate(item, f"{pointer}/{index}")
            if found is not None:
                return found
    return None


def duplicate_member(body: bytes) -> str | None:
    """The JSON pointer of the first duplicated member of a body, if any.

    Args:
        body: the raw request body.

    Returns:
        The pointer (``/first_message/content``), or None when no member is duplicated
        or the body is not JSON at all (the typed decoder answers that one).
    """
    try:
        decoded = json.loads(body, object_pairs_hook=_object)
    except (ValueError, RecursionError):
        return None
    return _first_duplicate(decoded, "")


async def refuse_duplicate_members(request: Request[Any, Any, Any]) -> None:
    """Litestar ``before_request`` hook: refuse bodies with duplicated members.

    Args:
        request: the incoming request.

    Raises:
        ValidationFailed: with the pointer of the duplicated member.
    """
    if request.method not in _METHODS_WITH_BODY:
        return
    pointer = duplicate_member(await request.body())
    if pointer is not None:
        raise ValidationFailed([FieldError(pointer=pointer, code="duplicate_member")])
