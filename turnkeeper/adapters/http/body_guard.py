"""Request body checks before decoding: media type, nesting depth, NUL characters, types.

Litestar decodes a JSON body into plain Python values before it converts them to the
route's struct, and that first decoding recurses once per nesting level: a body nested
ten thousand deep ends in a `RecursionError` (a 500). And PostgreSQL text cannot hold
U+0000, so a NUL character in any string member would fail deep in the adapter. Both
are refused here, before anything is decoded or stored, with ``400 validation_failed``:

- code ``too_deep`` when arrays and objects nest deeper than ``http.max_json_depth``
  (the body's own object counts as one), at the pointer of the top-level member whose
  value is too deep (the empty pointer when the body itself is an array);
- code ``invalid_character`` at the pointer of the first string member holding a NUL.

A query parameter that an API route does not declare, or a repeated one, is refused first
(`turnkeeper.adapters.http.query_guard`).

A route that takes no body (close, cancel, archive, a DELETE ...) refuses one that is not empty,
blank or ``{}`` (`unexpected_body`): ``unknown_member`` at each member, as API.md
refuses every unknown member.

Before them, a route that takes a JSON body refuses a body of another media type
(``415 unsupported_media_type``: a ``Content-Type`` that is neither ``application/json``
nor ``*/*+json``; a request without one is read as JSON; a body in a content coding,
``Content-Encoding`` other than ``identity``, is refused as well; an empty body to a route whose
body has only optional members is no body, whatever its media type, and so is a blank
one there, `BlankBodyRequest`), and after them a
member that fits its type only by msgspec's lax rules is refused (``invalid_type``,
`turnkeeper.adapters.http.decoding.loose_member`). Nothing is stored in either case.

Both checks look at the raw bytes first and decode only a body that may fail them: one
with more brackets than the depth allows, or one that holds the JSON escape of U+0000 (a raw
NUL byte is no JSON at all and is refused as malformed). The depth scan is one linear
pass over the special bytes, without recursion.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

from litestar import Request
from litestar.exceptions import HTTPException, InternalServerException
from litestar.status_codes import HTTP_415_UNSUPPORTED_MEDIA_TYPE

from turnkeeper.adapters.http.correlation import UNREADABLE_BODY
from turnkeeper.adapters.http.decoding import (
    duplicate_member,
    loose_member,
    malformed_body,
    pointer,
    pointer_token,
)
from turnkeeper.adapters.http.problems import ClientGone
from turnkeeper.adapters.http.query_guard import QueryGuard
from turnkeeper.adapters.http.requests import OptionalBody
from turnkeeper.domain.errors import FieldError, ValidationFailed

#: The content coding that is no coding (RFC 9110, section 8.4.1).
IDENTITY_CODING = "identity"
#: The methods whose requests may carry a body: a route of one that takes none (close,
#: archive, a DELETE) refuses one. GET and HEAD bodies mean nothing and are not read.
_METHODS_WITH_BODY = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_SPECIAL = re.compile(rb'[\\"\[\]{}]')
_BACKSLASH, _QUOTE, _BRACE = ord("\\"), ord('"'), ord("{")
_OPENERS = frozenset(b"[{")
_CLOSERS = frozenset(b"]}")
_NUL_ESCAPE = b"\\u0000"
_NUL = "\x00"

#: A ``before_request`` hook of Litestar.
BeforeRequest = Callable[[Request[Any, Any, Any]], Awaitable[None]]


def _member_pointer(raw_name: bytes | None) -> str:
    if raw_name is None:
        return ""
    try:
        name = json.loads(raw_name)
    except ValueError:
        return ""
    return f"/{pointer_token(name)}" if isinstance(name, str) else ""


def too_deep(body: bytes, max_depth: int) -> str | None:
    """The pointer of the top-level member whose value nests beyond a depth, if any.

    Args:
        body: the raw request body (JSON or not).
        max_depth: ``http.max_json_depth``; the body's own object or array is depth 1.

    Returns:
        ``/<member>`` for a body object, ``""`` for a body array, or None when nothing
        nests deeper than `max_depth`.
    """
    if body.count(b"[") + body.count(b"{") <= max_depth:
        return None
    depth = 0
    in_string = False
    escaped_at = -1
    string_start = 0
    last_string: bytes | None = None  # the last string closed inside the body object
    member: bytes | None = None
    object_body = False
    for match in _SPECIAL.finditer(body):
        at = match.start()
        if at == escaped_at:
            continue
        char = body[at]
        if in_string:
            if char == _BACKSLASH:
                escaped_at = at + 1
            elif char == _QUOTE:
                in_string = False
                if depth == 1:
                    last_string = body[string_start : at + 1]
        elif char == _QUOTE:
            in_string = True
            string_start = at
        elif char in _OPENERS:
            if depth == 0:
                object_body = char == _BRACE
            depth += 1
            if depth == 2:
                # In an object, the last string before a nested value is its name.
                member = last_string if object_body else None
            if depth > max_depth:
                return _member_pointer(member)
        elif char in _CLOSERS and depth > 0:
            depth -= 1
    return None


def _first_nul(value: Any, pointer: str) -> str | None:
    if isinstance(value, str):
        return pointer if _NUL in value else None
    if isinstance(value, dict):
        for name, member in value.items():
            found = _first_nul(member, f"{pointer}/{pointer_token(name)}")
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _first_nul(item, f"{pointer}/{index}")
            if found is not None:
                return found
    return None


def nul_member(body: bytes) -> str | None:
    """The pointer of the first string member that holds U+0000, if any.

    Call it after `too_deep`: the decoding recurses once per level.

    Args:
        body: the raw request body.

    Returns:
        The pointer (``/first_message/content``), or None when no string holds a NUL
        or the body is no JSON (the typed decoder answers that one).
    """
    if _NUL_ESCAPE not in body:
        return None
    try:
        decoded = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return _first_nul(decoded, "")


def hostile_member(body: bytes, max_depth: int) -> FieldError | None:
    """The first refusal of a body before its types are looked at, if any.

    In the guard's order: nesting too deep (`too_deep`), a duplicated member
    (`turnkeeper.adapters.http.decoding.duplicate_member`), a NUL character (`nul_member`).

    Args:
        body: the raw request body.
        max_depth: ``http.max_json_depth``.

    Returns:
        ``too_deep``, ``duplicate_member`` or ``invalid_character`` at the member's
        pointer, or None when the body passes all three.
    """
    pointer = too_deep(body, max_depth)
    if pointer is not None:
        return FieldError(pointer=pointer, code="too_deep")
    pointer = duplicate_member(body)
    if pointer is not None:
        return FieldError(pointer=pointer, code="duplicate_member")
    pointer = nul_member(body)
    if pointer is not None:
        return FieldError(pointer=pointer, code="invalid_character")
    return None


def is_json_media_type(content_type: str | None) -> bool:
    """Whether a ``Content-Type`` header names JSON (absent: read as JSON).

    Args:
        content_type: the header, None when absent.

    Returns:
        True for none, ``application/json`` and any ``<type>/<subtype>+json``, with or
        without parameters (``; charset=utf-8``).
    """
    if content_type is None:
        return True
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.count("/") == 1 and media.endswith("+json"))


def _content_type(request: Request[Any, Any, Any]) -> str | None:
    """The request's ``Content-Type``; one given twice reads as a proxy joins them.

    The field is no list (RFC 9110, section 8.3): ``application/json`` with
    ``text/plain`` after it is no JSON body, as the one line ``application/json,
    text/plain`` is not (the first of the two lines was read alone).
    """
    given = request.headers.getall("content-type", [])
    if not given:
        return None
    return given[0] if len(given) == 1 else ", ".join(given)


def _coded(encodings: list[str]) -> bool:
    """Whether ``Content-Encoding`` names a coding other than ``identity`` (no coding)."""
    return any(
        coding.strip().lower() not in ("", IDENTITY_CODING)
        for header in encodings
        for coding in header.split(",")
    )


def _body_type(request: Request[Any, Any, Any]) -> type[Any] | None:
    """The body struct of the request's route, None for a route without a body."""
    handler = request.scope.get("route_handler")
    field = None if handler is None else handler.parsed_fn_signature.parameters.get("data")
    kind = None if field is None else field.annotation
    return kind if isinstance(kind, type) else None


def _takes_optional_body(request: Request[Any, Any, Any]) -> bool:
    kind = _body_type(request)
    return kind is not None and issubclass(kind, OptionalBody)


class BlankBodyRequest(Request[Any, Any, Any]):
    """The application's request: a blank body to a route of optional members is no body.

    Routes that take no body take a blank one (`unexpected_body`); a route whose body has
    only optional members takes no body as ``{}``, so a body of whitespace alone, which
    is no JSON, reads as no body there too instead of ``malformed_json``.
    """

    async def body(self) -> bytes:
        """The raw body; empty for a blank one on a route of optional members.

        Returns:
            The body's bytes.
        """
        raw = await super().body()
        # Only a body that starts with whitespace can be blank: a JSON body costs no copy.
        if raw[:1].isspace() and not raw.strip() and _takes_optional_body(self):
            return b""
        return raw


def unexpected_body(content_type: str | None, body: bytes) -> Exception | None:
    """The refusal of a body sent to a route that takes none (close, cancel, archive ...).

    API.md gives these routes no body, and every unknown member is refused: a body that
    is empty, blank or ``{}`` is nothing to refuse, anything else is.

    Args:
        content_type: the request's ``Content-Type``, None when absent.
        body: the raw body.

    Returns:
        None for nothing to refuse; else 415 for a body that is no JSON, 400
        ``malformed_json``, ``invalid_type`` at ``""`` for JSON other than an object,
        or ``unknown_member`` at each member.
    """
    if not body.strip():
        return None
    if not is_json_media_type(content_type):
        return HTTPException(status_code=HTTP_415_UNSUPPORTED_MEDIA_TYPE)
    try:
        value = json.loads(body)
    except ValueError:
        return malformed_body()
    if not isinstance(value, dict):
        return ValidationFailed([FieldError(pointer="", code="invalid_type")])
    if not value:
        return None
    return ValidationFailed(
        [FieldError(pointer=pointer((name,)), code="unknown_member") for name in value]
    )


def body_guard(max_depth: int, queries: QueryGuard | None = None) -> BeforeRequest:
    """The ``before_request`` hook that refuses hostile bodies before decoding.

    Checks, in order: the query's parameter names (`QueryGuard`), the media type,
    nesting depth, duplicated members
    (`turnkeeper.adapters.http.decoding.duplicate_member`), NUL characters,
    members that fit their type only by lax conversion.

    Args:
        max_depth: ``http.max_json_depth``.
        queries: the query parameters each API route declares; None checks no query.

    Returns:
        The hook.
    """

    async def guard(request: Request[Any, Any, Any]) -> None:
        """Refuse a hostile body or a query that names a parameter wrongly.

        Raises:
            ClientGone: the client left before its body arrived.
            HTTPException: 415 (``unsupported_media_type``) for a body that is no JSON.
            ValidationFailed: ``unknown_member`` or ``duplicate_member`` at a query
                parameter's name; ``too_deep``, ``duplicate_member``,
                ``invalid_character`` or ``invalid_type`` at a body member's pointer.
        """
        if queries is not None:
            refused = queries.refusal(
                request.scope.get("route_handler"), request.scope.get("query_string", b"")
            )
            if refused is not None:
                raise refused
        if request.method not in _METHODS_WITH_BODY:
            return
        kind = _body_type(request)
        # Where the body has only optional members, an empty one is no body at all, of
        # whatever media type (``curl -d ''`` sends a form's): it is read before the
        # media type is judged.
        may_be_empty = _takes_optional_body(request)
        content_type = _content_type(request)
        if kind is not None and not may_be_empty and not is_json_media_type(content_type):
            raise HTTPException(status_code=HTTP_415_UNSUPPORTED_MEDIA_TYPE)
        try:
            body = await request.body()
        except InternalServerException as exc:
            # Litestar's only error while it reads a body: the client disconnected, or
            # the server ended the request because its body could not be read.
            raise ClientGone(unreadable=bool(request.scope.get(UNREADABLE_BODY))) from exc
        if body and _coded(request.headers.getall("content-encoding", [])):
            # RFC 9110, section 15.5.16: no content coding is decoded here.
            raise HTTPException(status_code=HTTP_415_UNSUPPORTED_MEDIA_TYPE)
        if may_be_empty:
            if not body:
                return
            if not is_json_media_type(content_type):
                raise HTTPException(status_code=HTTP_415_UNSUPPORTED_MEDIA_TYPE)
        hostile = hostile_member(body, max_depth)
        if hostile is not None:
            raise ValidationFailed([hostile])
        if kind is None:
            unexpected = unexpected_body(content_type, body)
            if unexpected is not None:
                raise unexpected
            return
        loose = loose_member(body, kind)
        if loose is not None:
            raise ValidationFailed([loose])

    return guard
