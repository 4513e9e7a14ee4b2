"""OpenAPI helpers: the problem answers each route can give, documented once."""

from __future__ import annotations

from litestar.openapi.datastructures import ResponseSpec

from adapters.http.problems import PROBLEM_MEDIA_TYPE, STATUS_BY_CODE
from adapters.http.schemas import Problem

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
