"""One agent's HTTP session with the server: the bearer token, and answers or client errors."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from turnkeeper.adapters.client import wire
from turnkeeper.adapters.client.errors import ClientUnavailable


class ApiSession:
    """An `httpx.AsyncClient` that turns every failure into a client error.

    Args:
        base_url: the server.
        token: the bearer token of every request (never logged).
        transport: an httpx transport, or None for httpx's own.
        timeout: httpx timeouts, or None for httpx's default.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: httpx.Timeout | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        if timeout is None:
            self._http = httpx.AsyncClient(base_url=base_url, headers=headers, transport=transport)
        else:
            self._http = httpx.AsyncClient(
                base_url=base_url, headers=headers, transport=transport, timeout=timeout
            )

    @property
    def base_url(self) -> str:
        """The server's base URL."""
        return str(self._http.base_url)

    @property
    def http(self) -> httpx.AsyncClient:
        """The underlying client, for the calls that stream or set their own timeouts."""
        return self._http

    async def request(
        self,
        method: str,
        path: str,
        *,
        json: Mapping[str, Any] | None = None,
        params: Mapping[str, int] | None = None,
    ) -> httpx.Response:
        """Send one request and return its successful answer.

        Args:
            method: the HTTP method.
            path: the path below the base URL.
            json: the JSON body, if any.
            params: the query parameters, if any.

        Returns:
            The 2xx answer.

        Raises:
            ClientProblem: on an error answer.
            ClientUnavailable: when the server cannot be reached.
        """
        try:
            response = await self._http.request(method, path, json=json, params=params)
        except httpx.TransportError as exc:
            raise ClientUnavailable(f"{method} {path}: {type(exc).__name__}") from exc
        if not response.is_success:
            raise wire.problem(response)
        return response

    async def aclose(self) -> None:
        """Close the connections."""
        await self._http.aclose()
