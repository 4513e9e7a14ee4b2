"""OpenAPI helpers: the problem answers of each route, and what Litestar does not write.

`problems` documents the problem answers a route can give, once for every route;
`complete_document` adds to the generated document what the routes do but Litestar
leaves out (closed request bodies, paging bounds, links).
"""

from __future__ import annotations

from collections.abc import Iterator

import msgspec
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import OpenAPI, Operation, Parameter, Schema

from turnkeeper.adapters.http.openapi_links import add_links
from turnkeeper.adapters.http.problems import PROBLEM_MEDIA_TYPE, STATUS_BY_CODE
from turnkeeper.adapters.http.schemas import Body, Problem
from turnkeeper.application.settings import Settings

_DESCRIPTIONS: dict[int, str] = {
    400: "validation_failed (errors[] names the members)",
    401: "unauthenticated: missing or unknown bearer token",
    403: "forbidden, channel_read_only or invocation_token_invalid (reason says why)",
    404: "not_found: unknown, or not readable by the caller (identical answers)",
    405: "method_not_allowed",
    409: "conflict, idempotency_conflict, invalid_state_transition or base_version_conflict",
    413: "payload_too_large: the body exceeds http.max_body_bytes",
    429: "rate_limited: see Retry-After",
    500: "internal",
    503: "unavailable",
}

#: Problems any authenticated route can answer.
COMMON = (400, 401, 404, 413, 500)


def problems(*statuses: int) -> dict[int, ResponseSpec]:
    """Response specs of problem answers.

    Args:
        statuses: HTTP statuses; `COMMON` is always included.

    Returns:
        Specs for Litestar's ``responses`` argument.
    """
    wanted = sorted({*COMMON, *statuses})
    assert all(status in STATUS_BY_CODE.values() for status in wanted)
    return {
        status: ResponseSpec(
            data_container=Problem,
            media_type=PROBLEM_MEDIA_TYPE,
            description=_DESCRIPTIONS[status],
        )
        for status in wanted
    }


def _request_bodies(kind: type[Body] = Body) -> Iterator[type[Body]]:
    for sub in kind.__subclasses__():
        yield sub
        yield from _request_bodies(sub)


def _exact_integer_bounds(kind: type[Body], schema: Schema) -> None:
    # Litestar writes the bounds of an integer as floats, which rounds those beyond 2**53
    # (2**63 - 1 would read 2**63): write the integers msgspec checks.
    info = msgspec.inspect.type_info(kind)
    if not isinstance(info, msgspec.inspect.StructType):
        return
    for field in info.fields:
        bounds = field.type
        member = (schema.properties or {}).get(field.encode_name)
        if isinstance(bounds, msgspec.inspect.IntType) and isinstance(member, Schema):
            member.minimum = bounds.ge if bounds.ge is not None else member.minimum
            member.maximum = bounds.le if bounds.le is not None else member.maximum


def _operations(openapi: OpenAPI) -> Iterator[Operation]:
    for item in (openapi.paths or {}).values():
        for method in ("get", "put", "post", "delete", "patch"):
            operation = getattr(item, method)
            if isinstance(operation, Operation):
                yield operation


def complete_document(openapi: OpenAPI, settings: Settings) -> OpenAPI:
    """Add to the generated document what the routes do but Litestar does not write.

    - Every request body schema says ``additionalProperties: false``: an unknown member
      is refused with 400 ``unknown_member`` (API.md conventions); its integer bounds
      (a seq or version at most 2**63 - 1) are written exactly.
    - The paging parameters state their bounds: ``after`` and ``after_seq`` at least 0,
      ``limit`` from 1 to ``page.max_limit``, ``wait`` from 0 to
      ``stream.max_wait_seconds`` (outside: 400 ``out_of_range``).
    - The links between operations (`turnkeeper.adapters.http.openapi_links`).

    Args:
        openapi: the document Litestar generated; changed in place.
        settings: for ``page.max_limit``.

    Returns:
        The same document.

    Raises:
        LookupError: when a request body has no schema in the document.
    """
    schemas = openapi.components.schemas or {}
    for kind in _request_bodies():
        schema = schemas.get(kind.__name__)
        if not isinstance(schema, Schema):
            raise LookupError(f"the OpenAPI document has no schema {kind.__name__}")
        schema.additional_properties = False
        _exact_integer_bounds(kind, schema)
    bounds = {
        "after": (0, None),
        "after_seq": (0, None),
        "limit": (1, settings.page_max_limit),
        "wait": (0, int(settings.stream_max_wait.total_seconds())),
    }
    for operation in _operations(openapi):
        for parameter in operation.parameters or ():
            if isinstance(parameter, Parameter) and parameter.param_in == "query":
                found = bounds.get(parameter.name)
                if found is not None and isinstance(parameter.schema, Schema):
                    parameter.schema.minimum, parameter.schema.maximum = found
    return add_links(openapi)
