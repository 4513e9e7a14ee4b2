"""Strict input (issue 16 item 8), over HTTP on the memory adapter and on PostgreSQL.

- A JSON body member of the wrong JSON type that msgspec's lax rules would convert
  (``"1"`` for an integer, ``"false"`` for a boolean, ``1.0`` for an integer) answers
  400 ``validation_failed`` with ``invalid_type`` at the member's pointer, and stores
  nothing; the same body with the right type is accepted.
- A body that is not JSON by its ``Content-Type`` (``text/plain``, a form) answers 415
  ``unsupported_media_type`` problem+json on every route with a body, and stores
  nothing; ``application/json`` with a charset, and no ``Content-Type``, are JSON.
- Cursors beyond the largest seq (2^63 - 1) in ``after``, ``after_seq``,
  ``Last-Event-ID`` and ``through_seq`` answer 400 ``out_of_range`` at their pointer,
  never echoed back; the largest seq itself is accepted.
"""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest

from tests.reliability.test_hostile_input import (  # noqa: F401 (adapter_world: a fixture)
    AdapterWorld,
    adapter_world,
    started_run,
)
from tests.support.http import HttpWorld

#: The largest seq the stores hold (PostgreSQL bigint).
LARGEST_SEQ = 2**63 - 1
#: Cursors just beyond it, and far beyond it.
BEYOND = (2**63, 2**64, 10**30)


@attrs.frozen
class Typed:
    """A route, a valid body, and a member with a value of a JSON type it must refuse."""

    name: str
    caller: str
    method: str
    path: str
    body: dict[str, Any]
    ok: int
    pointer: str
    loose: object

    def spoiled(self) -> dict[str, Any]:
        body: dict[str, Any] = {**self.body}
        target = body
        *parents, last = self.pointer.strip("/").split("/")
        for part in parents:
            target[part] = {**target[part]}
            target = target[part]
        target[last] = self.loose
        return body


async def typed_routes(hw: HttpWorld, run_id: str) -> list[Typed]:
    """Every integer and boolean member a client writes, with a lax-only value."""
    lotse = str(hw.world.principal("lotse").id)
    channel = str(hw.world.channels["allgemein"].id)
    thread = str(hw.main_thread("allgemein"))
    shown = await hw.client.get(f"/v1/threads/{thread}", headers=hw.headers("lotse"))
    send = {
        "target": thread,
        "content": "Lotse answers",
        "client_message_id": "typed-1",
        "freshness": {"target_key": shown.json()["target_key"], "seen_up_to_seq": 0},
    }
    config, behavior = f"/v1/agents/{lotse}/config", f"/v1/channels/{channel}/behavior"
    agent = {"kind": "agent", "handle": "helper", "supports_followups": True}
    return [
        Typed("ack", "lotse", "POST", "/v1/agent/events/ack", {"through_seq": 0}, 204,
              "/through_seq", "0"),
        Typed("ack_float", "lotse", "POST", "/v1/agent/events/ack", {"through_seq": 0}, 204,
              "/through_seq", 0.0),
        Typed("patch", "lotse", "PATCH", f"/v1/runs/{run_id}", {"base_version": 2, "ops": []},
              200, "/base_version", "2"),
        Typed("send", "lotse", "POST", "/v1/agent/send", send, 200,
              "/freshness/seen_up_to_seq", "0"),
        Typed("config", "robin", "PUT", config, {"enabled": True}, 200, "/enabled", "false"),
        Typed("behavior", "robin", "PUT", behavior, {"free_response": True}, 200,
              "/free_response", "true"),
        Typed("principal", "robin", "POST", "/v1/principals", agent, 201,
              "/supports_followups", "false"),
    ]  # fmt: skip


TYPED = ("ack", "ack_float", "patch", "send", "config", "behavior", "principal")


@pytest.mark.parametrize("name", TYPED)
async def test_a_member_of_another_json_type_is_refused_at_its_pointer(
    adapter_world: AdapterWorld,  # noqa: F811 (the imported fixture)
    name: str,
) -> None:
    hw = adapter_world.hw
    case = next(c for c in await typed_routes(hw, await started_run(hw)) if c.name == name)
    before = await adapter_world.snapshot()

    refused = await hw.client.request(
        case.method, case.path, json=case.spoiled(), headers=hw.headers(case.caller)
    )

    assert refused.status_code == 400, refused.text
    problem = refused.json()
    assert problem["code"] == "validation_failed"
    assert [(e["pointer"], e["code"]) for e in problem["errors"]] == [
        (case.pointer, "invalid_type")
    ]
    assert await adapter_world.snapshot() == before
    accepted = await hw.client.request(
        case.method, case.path, json=case.body, headers=hw.headers(case.caller)
    )
    assert accepted.status_code == case.ok, accepted.text


#: Numbers RFC 8259 allows, written in place of a placeholder: one no float holds, and
#: an integer longer than Python's int conversion takes (4,300 digits).
HUGE_NUMBERS = ["1e400", "1" + "0" * 4400]
_PLACEHOLDER = "huge-number-here"


@pytest.mark.parametrize("huge", HUGE_NUMBERS, ids=["beyond floats", "4401 digits"])
@pytest.mark.parametrize("name", ["ack", "patch", "send"])
@pytest.mark.parametrize("where", ["known member", "unknown member"])
async def test_a_number_beyond_any_float_is_refused_at_its_pointer(
    adapter_world: AdapterWorld,  # noqa: F811 (the imported fixture)
    name: str,
    huge: str,
    where: str,
) -> None:
    # Both answered malformed_json at "", as for a body that is no JSON at all: out of
    # range in a member of the route, the unknown member's own refusal in another.
    hw = adapter_world.hw
    case = next(c for c in await typed_routes(hw, await started_run(hw)) if c.name == name)
    if where == "known member":
        spoiled, expected = attrs.evolve(case, loose=_PLACEHOLDER).spoiled(), case.pointer
        code = "out_of_range"
    else:
        spoiled, expected, code = {**case.body, "extra": _PLACEHOLDER}, "/extra", "unknown_member"
    before = await adapter_world.snapshot()

    refused = await hw.client.request(
        case.method,
        case.path,
        content=json.dumps(spoiled).replace(f'"{_PLACEHOLDER}"', huge),
        headers={**hw.headers(case.caller), "Content-Type": "application/json"},
    )

    assert refused.status_code == 400, refused.text
    assert [(e["pointer"], e["code"]) for e in refused.json()["errors"]] == [(expected, code)]
    assert await adapter_world.snapshot() == before


async def _route_ids(hw: HttpWorld) -> dict[str, str]:
    """The ids of the routes' path parameters, a running run's among them."""
    return {
        "space_id": str(hw.world.spaces["support"].id),
        "channel_id": str(hw.world.channels["allgemein"].id),
        "thread_id": str(hw.main_thread("allgemein")),
        "agent_id": str(hw.world.principal("lotse").id),
        "principal_id": str(hw.world.principal("sam").id),
        "run_id": await started_run(hw),
    }


def _body_routes(hw: HttpWorld) -> list[tuple[str, str]]:
    return [
        (method, path)
        for path, item in hw.client.spec["paths"].items()
        for method in ("post", "put", "patch")
        if method in item and "requestBody" in item[method]
    ]


@pytest.mark.parametrize("media_type", ["text/plain", "application/x-www-form-urlencoded"])
async def test_a_body_that_is_no_json_gets_415_on_every_route(
    adapter_world: AdapterWorld,  # noqa: F811 (the imported fixture)
    media_type: str,
) -> None:
    hw = adapter_world.hw
    ids = await _route_ids(hw)
    routes = _body_routes(hw)
    assert len(routes) >= 15
    before = await adapter_world.snapshot()
    for method, template in routes:
        caller = "lotse" if template.startswith(("/v1/agent/", "/v1/runs/")) else "robin"
        answer = await hw.client.request(
            method.upper(),
            template.format(**ids),
            content=b'{"client_msg_id": "plain", "content": "hello"}',
            headers={**hw.headers(caller), "Content-Type": media_type},
        )
        assert answer.status_code == 415, (method, template, answer.text)
        assert answer.headers["content-type"].startswith("application/problem+json")
        assert answer.json()["code"] == "unsupported_media_type"
    assert await adapter_world.snapshot() == before


@pytest.mark.parametrize("coding", ["gzip", "br", "identity, gzip"])
async def test_a_body_in_a_content_coding_gets_415_on_every_route(
    adapter_world: AdapterWorld,  # noqa: F811 (the imported fixture)
    coding: str,
) -> None:
    # RFC 9110, section 15.5.16: the server decodes no content coding. A JSON body
    # labelled gzip was stored as it came, and a real gzip body was malformed JSON.
    hw = adapter_world.hw
    ids = await _route_ids(hw)
    before = await adapter_world.snapshot()
    for method, template in _body_routes(hw):
        caller = "lotse" if template.startswith(("/v1/agent/", "/v1/runs/")) else "robin"
        answer = await hw.client.request(
            method.upper(),
            template.format(**ids),
            content=b'{"client_msg_id": "coded", "content": "hello"}',
            headers={
                **hw.headers(caller),
                "Content-Type": "application/json",
                "Content-Encoding": coding,
            },
        )
        assert answer.status_code == 415, (method, template, answer.text)
        assert answer.json()["code"] == "unsupported_media_type"
    assert await adapter_world.snapshot() == before
    # identity is no coding at all.
    stored = await hw.client.post(
        f"/v1/threads/{ids['thread_id']}/messages",
        content=b'{"client_msg_id": "identity", "content": "hello"}',
        headers={**hw.headers("alex"), "Content-Encoding": "identity"},
    )
    assert stored.status_code == 201, stored.text


async def test_json_with_a_charset_or_without_a_content_type_is_json(
    adapter_world: AdapterWorld,  # noqa: F811 (the imported fixture)
) -> None:
    hw = adapter_world.hw
    thread = hw.main_thread("allgemein")
    for n, content_type in enumerate(("application/json; charset=utf-8", None)):
        headers = hw.headers("alex")
        if content_type is not None:
            headers["Content-Type"] = content_type
        answer = await hw.client.post(
            f"/v1/threads/{thread}/messages",
            content=f'{{"client_msg_id": "json-{n}", "content": "hello"}}'.encode(),
            headers=headers,
        )
        assert answer.status_code == 201, answer.text


def _refused_cursor(answer: Any, pointer: str, value: int) -> None:
    assert answer.status_code == 400, answer.text
    problem = answer.json()
    assert (problem["code"], problem["errors"]) == (
        "validation_failed",
        [{"pointer": pointer, "code": "out_of_range"}],
    )
    assert str(value) not in answer.text


@pytest.mark.parametrize("value", BEYOND)
async def test_cursors_beyond_the_largest_seq_are_refused_never_echoed(
    adapter_world: AdapterWorld,  # noqa: F811 (the imported fixture)
    value: int,
) -> None:
    hw = adapter_world.hw
    lotse, alex = hw.headers("lotse"), hw.headers("alex")
    thread = hw.main_thread("allgemein")
    before = await adapter_world.snapshot()
    gets = [
        ("/v1/agent/events", {"after": value}, lotse, "/after"),
        ("/v1/agent/events", {"after": value, "wait": 1}, lotse, "/after"),
        ("/v1/events", {"after": value}, alex, "/after"),
        ("/v1/events", {"after": value, "wait": 1}, alex, "/after"),
        (f"/v1/threads/{thread}/messages", {"after_seq": value}, alex, "/after_seq"),
        ("/v1/events/stream", {"after": value}, alex, "/after"),
        ("/v1/agent/events/stream", {"after": value}, lotse, "/after"),
    ]
    for url, params, headers, pointer in gets:
        _refused_cursor(await hw.client.get(url, params=params, headers=headers), pointer, value)
    for url, headers in (("/v1/events/stream", alex), ("/v1/agent/events/stream", lotse)):
        answer = await hw.client.get(url, headers={**headers, "Last-Event-ID": str(value)})
        _refused_cursor(answer, "/Last-Event-ID", value)
    ack = await hw.client.post(
        "/v1/agent/events/ack",
        content=f'{{"through_seq": {value}}}'.encode(),
        headers={**lotse, "Content-Type": "application/json"},
    )
    _refused_cursor(ack, "/through_seq", value)
    assert await adapter_world.snapshot() == before


async def test_the_largest_seq_is_a_cursor(
    adapter_world: AdapterWorld,  # noqa: F811 (the imported fixture)
) -> None:
    hw = adapter_world.hw
    lotse, alex = hw.headers("lotse"), hw.headers("alex")
    thread = hw.main_thread("allgemein")
    page = await hw.client.get("/v1/agent/events", params={"after": LARGEST_SEQ}, headers=lotse)
    assert (page.status_code, page.json()) == (200, {"events": [], "next_after": LARGEST_SEQ})
    shared = await hw.client.get("/v1/events", params={"after": LARGEST_SEQ}, headers=alex)
    assert (shared.status_code, shared.json()["events"]) == (200, [])
    history = await hw.client.get(
        f"/v1/threads/{thread}/messages", params={"after_seq": LARGEST_SEQ}, headers=alex
    )
    assert (history.status_code, history.json()["messages"]) == (200, [])
    ack = await hw.client.post(
        "/v1/agent/events/ack", json={"through_seq": LARGEST_SEQ}, headers=lotse
    )
    assert ack.status_code == 204
