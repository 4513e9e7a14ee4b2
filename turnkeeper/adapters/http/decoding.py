"""The one place where a request that does not decode becomes an error, with JSON pointers.

Every offending member is named by a JSON pointer (RFC 6901) from the root of the body
(``/first_message/mentions/0``) or, for a query parameter, by its name (``/after``):
`pointer` writes them all, with `pointer_token` escaping each name. Three ways a
request fails to decode:

- a body with a duplicated member is ambiguous (two parsers may read different values
  from it; msgspec keeps the last), so `refuse_duplicate_body` refuses it before
  decoding, code ``duplicate_member``;
- a body that is not JSON at all: `malformed_body`, pointer ``""``;
- a body, query parameter or path id that does not fit its type: `decode_failure`
  reads Litestar's `ValidationException` (whose messages are msgspec's) into the same
  `ValidationFailed` the services raise. A path id that is not a UUID names nothing,
  so alone it answers `NotFound`, exactly like an id that names nothing; with a body or
  query error beside it, the 400 names those, as it did before ids were typed.

Litestar converts a body with msgspec's lax rules (``strict=False``, which query
parameters need), so a body member ``"1"`` would pass for an integer and ``"false"``
for a boolean. `loose_member` decodes the body strictly first and names the member
that only the lax rules accept (code ``invalid_type``); every other failure is left to
the typed decoder, so its answer does not change.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Mapping
from typing import Any

import msgspec
from litestar import Request
from litestar.exceptions import ValidationException

from turnkeeper.domain.errors import DomainError, FieldError, NotFound, ValidationFailed

_METHODS_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})


_PATH_PART = re.compile(r"\.([^.\[]+)|\[(\d+)\]")
# msgspec's message for a member named wrongly, wherever it comes from: the name is
# quoted whole (it may hold a backtick or " - "), then the place, if msgspec names one
# (at the root of a raw decode it does not: ``Object contains unknown field `extra```).
# Litestar's copy in its error items is cut at the first " - ", so it has no place.
_NAMED_FIELD = re.compile(
    r"^Object (?P<what>contains unknown|missing required) field `(?P<name>.*?)`"
    r"(?: - at `\$(?P<path>[^`]*)`)?$",
    re.DOTALL,
)
#: Where Litestar decodes a body: msgspec's place of a member of it starts so.
_LITESTAR_BODY = ".data"
_FIELD_CODES = {"contains unknown": "unknown_member", "missing required": "required"}
# A number of the right type beyond a bound of the schema (``Expected `int` <= 9...``).
_BOUND = re.compile(r"^Expected `(?:int|float)` [<>]=? ")
# Where msgspec's own message places an error (``... - at `$.ops[0].value```).
_AT = re.compile(r" - at `\$(?P<path>[^`]*)`$", re.DOTALL)
#: msgspec's errors for a number no float holds, and for an integer of more digits than
#: Python converts (``sys.get_int_max_str_digits``): both are JSON, beyond any bound.
_HUGE_NUMBERS = ("Number out of range", "Integer value out of range")


def pointer_token(name: str) -> str:
    """A member name as one reference token of a JSON pointer (RFC 6901).

    Args:
        name: the member name.

    Returns:
        The name with ``~`` written ``~0`` and ``/`` written ``~1``.
    """
    return name.replace("~", "~0").replace("/", "~1")


def pointer(tokens: Iterable[str | int]) -> str:
    """The JSON pointer of a path of member names and array indexes.

    Args:
        tokens: the names and indexes from the root.

    Returns:
        For example ``/first_message/mentions/0``; ``""`` for the root.
    """
    return "".join(f"/{pointer_token(t) if isinstance(t, str) else t}" for t in tokens)


# -- duplicated members -----------------------------------------------------------------


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


def _first_duplicate(value: Any, path: tuple[str | int, ...]) -> str | None:
    if isinstance(value, _Members):
        if value.duplicates:
            return pointer((*path, value.duplicates[0]))
        for name, member in value.items():
            found = _first_duplicate(member, (*path, name))
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _first_duplicate(item, (*path, index))
            if found is not None:
                return found
    return None


class _Repeated(Exception):
    """An object of the body holds a name twice (the quick pass stops there)."""


def _plain_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    members = dict(pairs)
    if len(members) != len(pairs):
        raise _Repeated()
    return members


# Built once: `json.loads` with a hook builds a new decoder at every call.
_QUICK = json.JSONDecoder(object_pairs_hook=_plain_object)
_PAIRS = json.JSONDecoder(object_pairs_hook=_object)


def _text(body: bytes) -> str:
    # What `json.loads` does with bytes: UTF-8, -16 or -32 by the first bytes.
    return body.decode(json.detect_encoding(body), "surrogatepass")


def duplicate_member(body: bytes) -> str | None:
    """The JSON pointer of the first duplicated member of a body, if any.

    A quick pass decodes the body with plain objects and stops at the first object that
    holds a name twice; only such a body is decoded again, remembering the duplicates,
    to name the first of them.

    Args:
        body: the raw request body.

    Returns:
        The pointer (``/first_message/content``), or None when no member is duplicated
        or the body is not JSON at all (the typed decoder answers that one).
    """
    try:
        text = _text(body)
        _QUICK.decode(text)
    except _Repeated:
        pass
    except (ValueError, RecursionError):
        return None
    else:
        return None
    try:
        decoded = _PAIRS.decode(text)
    except (ValueError, RecursionError):
        return None
    return _first_duplicate(decoded, ())


def refuse_duplicate_body(body: bytes) -> None:
    """Refuse a body with a duplicated member.

    Args:
        body: the raw request body.

    Raises:
        ValidationFailed: with the pointer of the duplicated member.
    """
    found = duplicate_member(body)
    if found is not None:
        raise ValidationFailed([FieldError(pointer=found, code="duplicate_member")])


async def refuse_duplicate_members(request: Request[Any, Any, Any]) -> None:
    """Litestar ``before_request`` hook: refuse bodies with duplicated members.

    Args:
        request: the incoming request.

    Raises:
        ValidationFailed: with the pointer of the duplicated member.
    """
    if request.method not in _METHODS_WITH_BODY:
        return
    refuse_duplicate_body(await request.body())


# -- members of the wrong type ----------------------------------------------------------


def malformed_body() -> ValidationFailed:
    """What a body that is not JSON at all answers (Litestar raises a plain 400).

    Returns:
        The error, pointer ``""``, code ``malformed_json``.
    """
    return ValidationFailed([FieldError(pointer="", code="malformed_json")])


def decode_failure(
    exc: ValidationException, defaulted: Collection[str] = frozenset()
) -> DomainError:
    """What a request that Litestar could not decode answers.

    Args:
        exc: Litestar's error; its ``extra`` lists one item per offending parameter
            (``{"message", "key", "source"}``), msgspec's first error per parameter.
        defaulted: the route's parameters with a default (`defaulted_parameters`):
            left out, they are no error.

    Returns:
        `NotFound` when only path ids failed, else `ValidationFailed` naming every
        offending body member and query parameter.
    """
    extra = exc.extra if isinstance(exc.extra, list) else []
    items = [item for item in extra if isinstance(item, Mapping) and not _left_out(item, defaulted)]
    if items and all(item.get("source") == "path" for item in items):
        return NotFound()
    items = [item for item in items if item.get("source") != "path"]
    # msgspec stops at the first error of a body, so the cause is that one item's.
    whole = _whole_field_error(exc.__cause__)
    single_body = sum(item.get("source") == "body" for item in items) == 1
    errors = [
        whole
        if whole is not None and single_body and item.get("source") == "body"
        else _decode_error(item)
        for item in items
    ]
    return ValidationFailed(errors or [FieldError(pointer="", code="invalid")])


def _left_out(item: Mapping[str, Any], defaulted: Collection[str]) -> bool:
    """Whether an error item is Litestar's lookup of a parameter left out for its default.

    When a request fails to decode, Litestar checks each parameter again to name the
    failing ones, reading each from the request's values: a parameter the request left
    out fails that read with a `KeyError`, whose text is the quoted name. For a required
    body that is the body's refusal; for one with a default (no body for an
    `OptionalBody`) it is no error of the request.
    """
    key = item.get("key")
    return key in defaulted and item.get("message") == repr(key)


def defaulted_parameters(scope: Mapping[str, Any]) -> frozenset[str]:
    """The parameters of a request's route that take a default when left out.

    Args:
        scope: the request's ASGI scope (its ``route_handler``).

    Returns:
        Their names (``data`` for an `OptionalBody`); empty before routing.
    """
    handler = scope.get("route_handler")
    if handler is None:
        return frozenset()
    parameters = handler.parsed_fn_signature.parameters
    return frozenset(name for name, field in parameters.items() if field.has_default)


def _path_pointer(path: str) -> str:
    """The pointer of a msgspec path (``.first_message.mentions[0]``)."""
    return pointer(name or int(index) for name, index in _PATH_PART.findall(path))


def _whole_field_error(cause: BaseException | None) -> FieldError | None:
    # msgspec's own message, which Litestar chains as the cause, names a body member whole.
    if not isinstance(cause, msgspec.ValidationError):
        return None
    named = _NAMED_FIELD.match(str(cause))
    path = "" if named is None else named["path"] or ""
    if named is None or not (
        path == _LITESTAR_BODY or path.startswith((f"{_LITESTAR_BODY}.", f"{_LITESTAR_BODY}["))
    ):
        return None
    return _named_member(named, path[len(_LITESTAR_BODY) :])


def _named_member(named: re.Match[str], path: str) -> FieldError:
    """The error of a member named wrongly (a `_NAMED_FIELD` match) under a msgspec place."""
    at = f"{_path_pointer(path)}/{pointer_token(named['name'])}"
    return FieldError(pointer=at, code=_FIELD_CODES[named["what"]])


def _decode_error(item: Mapping[str, Any]) -> FieldError:
    # Litestar reports msgspec's first decode error per parameter as
    # {"message": "Object contains unknown field `x`", "key": "first_message", ...};
    # the key of the body's root is "data", query parameters are named as they are.
    what = str(item.get("message", ""))
    key = str(item.get("key", ""))
    if item.get("source") == "body" and (key == "data" or key.startswith("data.")):
        key = key[len("data") :]
    named = _NAMED_FIELD.match(what)
    if named is not None:
        return _named_member(named, f".{key}")
    at = _path_pointer(f".{key}")
    if what.startswith("Invalid enum value"):
        return FieldError(pointer=at, code="invalid_enum")
    if _BOUND.match(what):
        return FieldError(pointer=at, code="out_of_range")
    if what.startswith("Expected"):
        return FieldError(pointer=at, code="invalid_type")
    return FieldError(pointer=at, code="invalid")


# -- members that only the lax rules accept ---------------------------------------------


def loose_member(body: bytes, kind: type[Any]) -> FieldError | None:
    """The member of a body that fits its type only by msgspec's lax conversions.

    A string where a number or boolean is due (``"1"``, ``"false"``), or a float with no
    fraction where an integer is due: JSON has the types, a client must use them. A
    number beyond any float (``1e400``), or an integer of more digits than Python
    converts, is named here too, as ``out_of_range``: the
    typed decoder's refusal of it would read as a body that is no JSON at all
    (``malformed_json``), though RFC 8259 allows it.

    Args:
        body: the raw request body.
        kind: the route's body struct.

    Returns:
        ``invalid_type`` (or ``out_of_range``) at the member's pointer, the
        ``unknown_member`` or ``required`` of the first member named wrongly, or None
        when the body decodes strictly or fails for another reason too (the typed
        decoder answers it).
    """
    try:
        msgspec.json.decode(body, type=kind, strict=True)
    except msgspec.ValidationError as strict:
        message = str(strict)
        found = _AT.search(message)
        at = "" if found is None else _path_pointer(found["path"])
        if message.startswith(_HUGE_NUMBERS):
            return FieldError(pointer=at, code="out_of_range")
        named = _NAMED_FIELD.match(message)
        if named is not None:
            # The typed decoder would name it too, but Litestar decodes the body without
            # its type first, which fails on a huge number in an unknown member.
            return _named_member(named, named["path"] or "")
        try:
            msgspec.json.decode(body, type=kind, strict=False)
        except (msgspec.ValidationError, msgspec.DecodeError):
            return None
        return FieldError(pointer=at, code="invalid_type")
    except (msgspec.DecodeError, RecursionError):
        return None
    return None
