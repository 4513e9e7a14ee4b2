"""Ids in paths: a malformed id answers exactly like an id that names nothing.

Every route of /openapi.json with a path parameter is called with a segment that is not
a UUID and with a UUID that names nothing, without a token, as the owner without a body
and as the owner with an empty object: both answers must be the same (status, headers
and problem body apart from the correlation id), so a caller learns nothing from the
shape of an id, and the checks before the lookup (authentication, body decoding) keep
their order.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.support.http import ContractClient, bearer
from turnkeeper.application.demo import DemoWorld

UNKNOWN = "01900000-0000-7000-8000-0000000fffff"
MALFORMED = "not-a-uuid"
_PARAM = re.compile(r"\{[^/}]+\}")
_METHODS = ("get", "post", "put", "patch", "delete")


def _routes(spec: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (method, template)
        for template, item in sorted(spec["paths"].items())
        if _PARAM.search(template)
        for method in _METHODS
        if method in item
    ]


def _answer(response: Any) -> tuple[int, dict[str, str], Any]:
    headers = {
        k: v for k, v in response.headers.items() if k not in {"x-correlation-id", "content-length"}
    }
    body = response.json() if response.content else None
    if isinstance(body, dict):
        body.pop("correlation_id", None)
    return response.status_code, headers, body


async def test_every_route_with_an_id_is_checked(client: ContractClient) -> None:
    # The routes of API.md that name an id in their path (a new one joins the sweep).
    # 18 routes, plus the three of the principal tokens.
    assert len(_routes(client.spec)) == 21


@pytest.mark.parametrize("caller", ["nobody", "owner"])
@pytest.mark.parametrize("body", [None, {}], ids=["no-body", "empty-object"])
async def test_a_malformed_id_answers_like_an_unknown_one(
    client: ContractClient, world: DemoWorld, caller: str, body: dict[str, Any] | None
) -> None:
    headers = bearer(world.owner.token) if caller == "owner" else {}
    seen_statuses = set()
    for method, template in _routes(client.spec):
        answers = []
        for segment in (MALFORMED, UNKNOWN):
            path = _PARAM.sub(segment, template)
            kwargs: dict[str, Any] = {"headers": headers}
            if body is not None and method != "get":
                kwargs["json"] = body
            answers.append(_answer(await client.request(method.upper(), path, **kwargs)))
        malformed, unknown = answers
        assert malformed == unknown, (method, template)
        seen_statuses.add(malformed[0])
    # The sweep reaches each stage: authentication, body decoding and the lookup.
    expected = {401} if caller == "nobody" else {400, 404}
    assert seen_statuses == expected


@pytest.mark.parametrize(
    ("query", "pointers"),
    [
        ("limit=0", ["/limit"]),
        ("limit=-1", ["/limit"]),
        ("after_seq=-1", ["/after_seq"]),
        ("limit=2", None),
        ("after_seq=3&limit=1", None),
    ],
)
async def test_a_malformed_thread_id_answers_its_page_bounds_like_an_unknown_one(
    client: ContractClient, world: DemoWorld, query: str, pointers: list[str] | None
) -> None:
    # Found by an audit: `?limit=0` on a malformed id answered 404, on an unknown 400.
    answers = [
        _answer(
            await client.get(
                f"/v1/threads/{segment}/messages?{query}",
                headers=bearer(world.people["alex"].token),
            )
        )
        for segment in (MALFORMED, UNKNOWN)
    ]
    malformed, unknown = answers
    assert malformed == unknown
    if pointers is None:
        assert malformed[0] == 404
    else:
        assert malformed[0] == 400
        assert [e["pointer"] for e in malformed[2]["errors"]] == pointers
        assert {e["code"] for e in malformed[2]["errors"]} == {"out_of_range"}
