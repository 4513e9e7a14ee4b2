"""Query parameters a ``/v1`` route does not declare, or declares once, sent otherwise.

API.md refuses every unknown request member with ``400 validation_failed``, code
``unknown_member``; a body member repeated is refused as ambiguous
(``duplicate_member``). The query of a ``/v1`` route follows the same rules: a
parameter the route does not declare (``?after=`` on a thread's history, whose cursor is
``after_seq``) would otherwise be ignored without a word, and a repeated one decoded
from its last value. An integer parameter (a cursor, a page size) must be written as an
integer (`INTEGER`): Litestar would read ``1.5e1`` or ``0.99999999999999999`` through
a float. Each offending name is reported once, in the order of the query, at the pointer
of its name (``/after``), before the query's values are decoded.

Two values the decoder would read loosely are refused here too: the word ``null`` (any
case) for an optional parameter, which msgspec's lax reading of a query takes for an
absent value (``?principal_id=null`` listed every grant; ``invalid`` for an id,
``invalid_type`` for a number, as any other word gets), and a number beyond every bound
(``out_of_range``, as within the bounds' reach): an integer of more digits than the
largest seq has, which Python would not even convert past a few thousand digits, or a
number a float cannot hold.
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qsl

from litestar.routes import BaseRoute, HTTPRoute
from litestar.typing import FieldDefinition

from turnkeeper.adapters.http.decoding import pointer_token
from turnkeeper.domain.errors import FieldError, ValidationFailed
from turnkeeper.domain.events import MAX_SEQ

#: An integer as a query parameter or header (a cursor, a page size) writes it: digits,
#: without a leading zero or a sign other than ``-`` (and no ``-0``); the value is then
#: checked against its bounds (``out_of_range``).
INTEGER = re.compile(r"0|-?[1-9][0-9]*")

#: The most digits an integer parameter within its bounds can have: every one is at most
#: the largest seq (a cursor) or a page size far below it.
MAX_INTEGER_DIGITS = len(str(MAX_SEQ))
#: The word msgspec's lax reading of a query takes for an absent optional value.
NULL_WORD = "null"

#: The routes whose queries are checked: the API (the documentation page and the
#: console are pages that browsers and their tools may call with queries of their own).
API_PREFIX = "/v1/"


class QueryGuard:
    """The query parameter names each API route handler declares.

    Learnt once from the application's routes (`learn`); a handler it never learnt
    (a page outside ``/v1``) has its query left alone.
    """

    def __init__(self) -> None:
        # By the handler object itself (route handlers compare and hash by identity).
        self._names: dict[object, frozenset[str]] = {}
        self._integers: dict[object, frozenset[str]] = {}
        self._numbers: dict[object, frozenset[str]] = {}
        self._nullable: dict[object, dict[str, str]] = {}

    def learn(self, routes: Sequence[BaseRoute]) -> None:
        """Record the query parameters of every API route's handlers.

        Args:
            routes: the application's routes (`litestar.Litestar.routes`).
        """
        for route in routes:
            if not isinstance(route, HTTPRoute) or not route.path.startswith(API_PREFIX):
                continue
            for handler in route.route_handlers:
                model = handler.create_kwargs_model(path_parameters=route.path_parameters)
                params = handler.parsed_fn_signature.parameters
                self._names[handler] = frozenset(
                    param.field_alias for param in model.expected_query_params
                )
                self._integers[handler] = frozenset(
                    param.field_alias
                    for param in model.expected_query_params
                    if _is_integer(params[param.field_name])
                )
                self._numbers[handler] = frozenset(
                    param.field_alias
                    for param in model.expected_query_params
                    if float in _types(params[param.field_name])
                )
                self._nullable[handler] = {
                    param.field_alias: _null_code(params[param.field_name])
                    for param in model.expected_query_params
                    if _takes_null_word(params[param.field_name])
                }

    def refusal(self, handler: Any, query_string: bytes) -> ValidationFailed | None:
        """The refusal of a request's query, if it names a parameter wrongly.

        Args:
            handler: the route handler the request was routed to.
            query_string: the raw query (``scope["query_string"]``).

        Returns:
            ``unknown_member`` for each name the route does not declare,
            ``duplicate_member`` for each declared name given more than once,
            ``invalid_type`` for an integer parameter not written as one (`INTEGER`),
            ``invalid`` or ``invalid_type`` for the word null (`NULL_WORD`) and
            ``out_of_range`` for a number beyond every bound; None when the query is
            fine or the route is not an API route.
        """
        if not query_string:
            return None
        names = self._names.get(handler)
        if names is None:
            return None
        integers = self._integers.get(handler, frozenset())
        numbers = self._numbers.get(handler, frozenset())
        nullable = self._nullable.get(handler, {})
        seen: set[str] = set()
        reported: set[str] = set()
        errors: list[FieldError] = []
        for name, value in parse_qsl(query_string.decode("latin-1"), keep_blank_values=True):
            if name in reported:
                continue
            if name not in names:
                errors.append(FieldError(pointer=f"/{pointer_token(name)}", code="unknown_member"))
                reported.add(name)
            elif name in seen:
                errors.append(
                    FieldError(pointer=f"/{pointer_token(name)}", code="duplicate_member")
                )
                reported.add(name)
            elif (code := _value_refusal(value, name in integers, name in numbers)) or (
                code := nullable.get(name) if value.lower() == NULL_WORD else None
            ):
                errors.append(FieldError(pointer=f"/{pointer_token(name)}", code=code))
                reported.add(name)
            seen.add(name)
        return ValidationFailed(errors) if errors else None


def _value_refusal(value: str, integer: bool, number: bool) -> str | None:
    """The code of an integer or number parameter's value refused before decoding."""
    if integer:
        if not INTEGER.fullmatch(value):
            # Litestar would read ``1.5e1`` or ``0.99999999999999999`` through a float:
            # another cursor than the one written, or a page size out of its bounds.
            return "invalid_type"
        if len(value.lstrip("-")) > MAX_INTEGER_DIGITS:
            return "out_of_range"
    elif number:
        try:
            read = float(value)
        except ValueError:
            return None  # the decoder's own answer
        if math.isinf(read):
            return "out_of_range"
    return None


def _types(field: FieldDefinition) -> list[Any]:
    """The annotation of a handler's parameter and of its inner types (of a union)."""
    return [field.annotation, *(inner.annotation for inner in field.inner_types)]


def _is_integer(field: FieldDefinition) -> bool:
    """Whether a handler's parameter is an integer (``int`` or ``int | None``)."""
    return int in _types(field)


def _takes_null_word(field: FieldDefinition) -> bool:
    """Whether the decoder would read the word null as this parameter's absent value."""
    types = _types(field)
    return type(None) in types and str not in types


def _null_code(field: FieldDefinition) -> str:
    """The code the decoder gives this parameter's other words: an id's, or a number's."""
    return "invalid" if uuid.UUID in _types(field) else "invalid_type"
