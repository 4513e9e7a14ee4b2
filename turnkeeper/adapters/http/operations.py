"""Operational routes: liveness and readiness (no authentication)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from litestar import Request, Response, get
from litestar.di import NamedDependency
from litestar.enums import OpenAPIMediaType
from litestar.openapi.datastructures import ResponseSpec
from litestar.status_codes import HTTP_503_SERVICE_UNAVAILABLE

from turnkeeper.adapters.http.answers import Health, Problem
from turnkeeper.adapters.http.openapi import UNAVAILABLE_EXAMPLE
from turnkeeper.adapters.http.problems import PROBLEM_MEDIA_TYPE, NotReady

#: Checks that the process can serve: returns None when ready, else a short reason
#: (``database_unreachable``, ``migrations_pending``).
Readiness = Callable[[], Awaitable[str | None]]
#: The application state's key of the encoded OpenAPI document.
_OPENAPI_BYTES = "turnkeeper.openapi_json"


async def always_ready() -> str | None:
    """Readiness of a process without a database (the memory adapter).

    Returns:
        None: always ready.
    """
    return None


class ReadinessCheck:
    """Holds the readiness callable for the handler (a plain value to inject).

    Args:
        check: the readiness callable; it bounds its own time (a PostgreSQL backend by
            ``database.readiness_timeout``).
        retry_after: the ``Retry-After`` of a 503 (``database.reconnect_max_wait``).
    """

    def __init__(self, check: Readiness, *, retry_after: int) -> None:
        self.check = check
        self.retry_after = retry_after


@get("/healthz", tags=["operations"])
async def healthz() -> Health:
    """The process is up."""
    return Health(status="ok")


@get(
    "/readyz",
    tags=["operations"],
    responses={
        HTTP_503_SERVICE_UNAVAILABLE: ResponseSpec(
            data_container=Problem,
            media_type=PROBLEM_MEDIA_TYPE,
            examples=[UNAVAILABLE_EXAMPLE],
            description=(
                "unavailable: the database is unreachable or migrations are pending "
                "(see Retry-After)"
            ),
        )
    },
)
async def readyz(readiness: NamedDependency[ReadinessCheck]) -> Health:
    """The database is reachable and its migrations are current.

    Raises:
        NotReady: answered 503 with the reason.
    """
    reason = await readiness.check()
    if reason is not None:
        raise NotReady(reason, retry_after=readiness.retry_after)
    return Health(status="ready")


@get("/openapi.json", include_in_schema=False, media_type=OpenAPIMediaType.OPENAPI_JSON)
async def openapi_document(request: Request[Any, Any, Any]) -> Response[bytes]:
    """The OpenAPI 3.1 document generated from the routes, encoded once per application.

    The document is complete when `create_app` returns and never changes after;
    converting it to a dictionary cost about 30 ms per request.
    """
    state = request.app.state
    body = state.get(_OPENAPI_BYTES)
    if not isinstance(body, bytes):
        body = msgspec.json.encode(request.app.openapi_schema.to_schema())
        state[_OPENAPI_BYTES] = body
    return Response(content=body, media_type=OpenAPIMediaType.OPENAPI_JSON)
