"""The hot routes' fast path answers byte for byte what Litestar's routes answer.

ADR 0032: `BearerPostFastPath` serves ``POST /v1/threads/{thread_id}/messages`` and
``POST /v1/agent/send`` without Litestar's pipeline and hands every request it does not
answer to Litestar. Each case
below is sent, in the same order, to two applications over two identical memory worlds
(fake clock, sequential ids): one with the fast path, one without. Status, every header
and the body must be equal, and so must the stores at the end; and each case says which
path must have answered it, so the comparison is never between Litestar and itself.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

import attrs
from litestar.types import Receive, Scope, Send

from tests.support.fakes import FakeClock
from tests.support.scenario import main_thread
from tests.support.services import memory_services
from turnkeeper.adapters.http import create_app
from turnkeeper.adapters.http.correlation import CorrelatedApp, Fallback, FastPath
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld, build_demo_world
from turnkeeper.application.settings import Settings

#: The body limit of both applications (small, so that a case can exceed it cheaply).
MAX_BODY = 4096
CORRELATION = "fast-path-parity"

#: Which path answered: the fast path, Litestar after the fast path declined, or
#: Litestar alone (the fast path did not claim the exchange).
FAST, DECLINED, UNCLAIMED = "fast", "declined", "unclaimed"


@attrs.define
class Recording:
    """Wraps the application's fast path and notes which path answered each exchange."""

    inner: FastPath
    paths: list[str] = attrs.Factory(list)

    def claims(self, scope: Scope) -> bool:
        """As the wrapped fast path; an unclaimed exchange is noted."""
        claimed = self.inner.claims(scope)
        if not claimed:
            self.paths.append(UNCLAIMED)
        return claimed

    async def serve(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        fallback: Fallback,
    ) -> None:
        """As the wrapped fast path, noting whether it handed the exchange on."""
        declined = False

        async def noted(s: Scope, r: Receive, se: Send) -> None:
            nonlocal declined
            declined = True
            await fallback(s, r, se)

        await self.inner.serve(scope, receive, send, noted)
        self.paths.append(DECLINED if declined else FAST)


@attrs.frozen
class Answer:
    """What an application sent for one exchange."""

    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes


@attrs.frozen
class Case:
    """One exchange: who sends what where, and which path must answer it."""

    name: str
    path: str
    expected: str
    status: int
    body: bytes | None = None
    chunks: Sequence[bytes] | None = None
    handle: str | None = "alex"
    headers: tuple[tuple[str, str], ...] = ()
    method: str = "POST"
    root_path: str = ""
    disconnect: bool = False


@attrs.define
class Side:
    """One application over its own world."""

    services: Services
    world: DemoWorld
    app: CorrelatedApp
    recording: Recording | None

    async def call(self, case: Case) -> Answer:
        """Send the case's exchange and collect everything the application sent."""
        thread = str(main_thread(self.world, "allgemein"))
        path = case.path.replace("{main}", thread).replace(
            "{esk}", str(main_thread(self.world, "eskalation"))
        )
        headers: list[tuple[bytes, bytes]] = [
            (b"host", b"turnkeeper.example.com"),
            (b"x-correlation-id", CORRELATION.encode()),
        ]
        if case.handle is not None:
            found = self.world.people.get(case.handle) or self.world.agents[case.handle]
            headers.append((b"authorization", f"Bearer {found.token}".encode()))
        headers += [(k.lower().encode(), v.encode()) for k, v in case.headers]
        chunks = list(case.chunks) if case.chunks is not None else [case.body or b""]
        if case.chunks is None and not any(k == "Content-Type" for k, _ in case.headers):
            headers.append((b"content-type", b"application/json"))
        if case.chunks is None and not any(k == "Content-Length" for k, _ in case.headers):
            headers.append((b"content-length", str(len(chunks[0])).encode()))
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": case.method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": case.root_path,
            "headers": headers,
            "client": ("127.0.0.1", 40000),
            "server": ("turnkeeper.example.com", 80),
            "state": {},
        }
        messages: list[dict[str, Any]] = [
            {"type": "http.request", "body": chunk, "more_body": at < len(chunks) - 1}
            for at, chunk in enumerate(chunks)
        ]
        if case.disconnect:
            messages[-1]["more_body"] = True
            messages.append({"type": "http.disconnect"})
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return messages.pop(0) if messages else {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await self.app(scope, receive, send)
        starts = [m for m in sent if m["type"] == "http.response.start"]
        if not starts:
            return Answer(status=0, headers=(), body=b"")
        return Answer(
            status=starts[0]["status"],
            headers=tuple((bytes(k), bytes(v)) for k, v in starts[0]["headers"]),
            body=b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body"),
        )


async def _side(settings: Settings, *, fast: bool) -> Side:
    services = memory_services(settings, FakeClock())
    world = await build_demo_world(services)
    app = create_app(services, settings)
    recording = None
    if fast:
        assert app.fast_path is not None
        recording = Recording(app.fast_path)
        app.fast_path = recording
    else:
        app.fast_path = None
    return Side(services=services, world=world, app=app, recording=recording)


def _json(value: object) -> bytes:
    return json.dumps(value).encode()


def _deep(levels: int) -> bytes:
    return (
        b'{"client_msg_id": "deep", "content": "x", "mentions": '
        + b"[" * levels
        + b"]" * levels
        + b"}"
    )


MESSAGES = "/v1/threads/{main}/messages"
SEND = "/v1/agent/send"


def _send(client_id: str | None, seen: int) -> bytes:
    body: dict[str, object] = {
        "target": "{esk}",
        "content": "Done, Alex.",
        "freshness": {"target_key": "thread:{esk}", "seen_up_to_seq": seen},
    }
    if client_id is not None:
        body["client_message_id"] = client_id
    return _json(body)


PLAIN = _json({"client_msg_id": "m1", "content": "hello"})

CASES = [
    Case("a plain message", MESSAGES, FAST, 201, PLAIN),
    Case("its replay", MESSAGES, FAST, 200, PLAIN),
    Case(
        "a conflicting replay",
        MESSAGES,
        FAST,
        409,
        _json({"client_msg_id": "m1", "content": "other"}),
    ),
    Case(
        "a mention that opens a run",
        MESSAGES,
        FAST,
        201,
        _json({"client_msg_id": "m2", "content": "help?", "mentions": ["{lotse}"]}),
    ),
    Case(
        "a follow-up while the run is busy",
        MESSAGES,
        FAST,
        201,
        _json({"client_msg_id": "m3", "content": "and also"}),
    ),
    Case(
        "a person with read only",
        MESSAGES,
        FAST,
        403,
        _json({"client_msg_id": "s1", "content": "hi"}),
        handle="sam",
    ),
    Case(
        "an unknown token",
        MESSAGES,
        FAST,
        401,
        PLAIN,
        handle=None,
        headers=(("Authorization", "Bearer nope"),),
    ),
    Case("no token", MESSAGES, DECLINED, 401, PLAIN, handle=None),
    Case(
        "another scheme",
        MESSAGES,
        DECLINED,
        401,
        PLAIN,
        handle=None,
        headers=(("Authorization", "Basic YWxleA=="),),
    ),
    Case("an unknown thread", f"/v1/threads/{uuid.UUID(int=7)}/messages", FAST, 404, PLAIN),
    Case(
        "a system kind",
        MESSAGES,
        FAST,
        400,
        _json({"client_msg_id": "k1", "content": "x", "kind": "system"}),
    ),
    Case("empty content", MESSAGES, FAST, 400, _json({"client_msg_id": "e1", "content": ""})),
    Case(
        "an unknown member",
        MESSAGES,
        DECLINED,
        400,
        _json({"client_msg_id": "u1", "content": "x", "colour": 1}),
    ),
    Case(
        "a number for a string",
        MESSAGES,
        DECLINED,
        400,
        _json({"client_msg_id": 5, "content": "x"}),
    ),
    Case("malformed JSON", MESSAGES, DECLINED, 400, b'{"client_msg_id": "x",'),
    Case("an empty body", MESSAGES, DECLINED, 400, b""),
    Case(
        "a duplicated member",
        MESSAGES,
        DECLINED,
        400,
        b'{"client_msg_id": "d1", "content": "x", "content": "y"}',
    ),
    Case("too deep", MESSAGES, DECLINED, 400, _deep(40)),
    Case(
        "a NUL character",
        MESSAGES,
        DECLINED,
        400,
        b'{"client_msg_id": "n1", "content": "a\\u0000b"}',
    ),
    Case("text/plain", MESSAGES, DECLINED, 415, PLAIN, headers=(("Content-Type", "text/plain"),)),
    Case(
        "a JSON suffix type",
        MESSAGES,
        FAST,
        201,
        _json({"client_msg_id": "j1", "content": "x"}),
        headers=(("Content-Type", "application/merge-patch+json"),),
    ),
    # Which of two tokens the client meant cannot be known: no credentials.
    Case(
        "two tokens",
        MESSAGES,
        DECLINED,
        401,
        _json({"client_msg_id": "t1", "content": "x"}),
        headers=(("Authorization", "Bearer nope"),),
    ),
    Case(
        "a declared length over the limit",
        MESSAGES,
        DECLINED,
        413,
        _json({"client_msg_id": "l1", "content": "x" * MAX_BODY}),
    ),
    Case(
        "a chunked body",
        MESSAGES,
        FAST,
        201,
        chunks=[b'{"client_msg_id": "c1", ', b'"content": "in two"}'],
    ),
    Case(
        "a chunked body over the limit",
        MESSAGES,
        DECLINED,
        413,
        chunks=[b'{"client_msg_id": "c2", "content": "', b"x" * MAX_BODY, b'"}'],
    ),
    Case(
        "a thread id with its hyphens elsewhere",
        "/v1/threads/{MAIN}/messages",
        DECLINED,
        404,
        _json({"client_msg_id": "up1", "content": "x"}),
    ),
    Case("no uuid at all", "/v1/threads/" + "z" * 36 + "/messages", DECLINED, 404, PLAIN),
    Case(
        "a trailing slash",
        MESSAGES + "/",
        UNCLAIMED,
        201,
        _json({"client_msg_id": "sl1", "content": "x"}),
    ),
    Case("the history", MESSAGES, UNCLAIMED, 200, method="GET"),
    Case("under a root path", MESSAGES, UNCLAIMED, 200, PLAIN, root_path="/mounted"),
    Case(
        "a client that left",
        MESSAGES,
        DECLINED,
        408,
        chunks=[b'{"client_msg_id": "gone", '],
        disconnect=True,
    ),
    Case("an agent's send", SEND, FAST, 200, _send("s1", 0), handle="lotse"),
    Case("its replay (already sent)", SEND, FAST, 200, _send("s1", 0), handle="lotse"),
    Case(
        "a person's message in the agent's thread",
        "/v1/threads/{esk}/messages",
        FAST,
        201,
        _json({"client_msg_id": "esk1", "content": "one more thing"}),
    ),
    Case("a send behind the thread (held)", SEND, FAST, 200, _send("s2", 1), handle="lotse"),
    Case("a person's send", SEND, FAST, 403, _send("s3", 2)),
    Case("a send without a client id", SEND, FAST, 400, _send(None, 2), handle="lotse"),
    Case(
        "a send with an unknown token",
        SEND,
        FAST,
        401,
        _send("s4", 2),
        handle=None,
        headers=(("Authorization", "Bearer nope"),),
    ),
    Case(
        "a send to no id",
        SEND,
        DECLINED,
        400,
        _json({"target": "nope", "content": "x"}),
        handle="lotse",
    ),
    Case(
        "a send with a string seq",
        SEND,
        DECLINED,
        400,
        _send("s5", 2).replace(b'"seen_up_to_seq": 2', b'"seen_up_to_seq": "2"'),
        handle="lotse",
    ),
    Case(
        "a send with an unknown member",
        SEND,
        DECLINED,
        400,
        _send("s6", 2).replace(b'"content"', b'"colour": 1, "content"'),
        handle="lotse",
    ),
    Case("a send at a trailing slash", SEND + "/", UNCLAIMED, 200, _send("s7", 2), handle="lotse"),
]


def _resolved(case: Case, side: Side) -> Case:
    lotse = str(side.world.principal("lotse").id)
    thread = str(main_thread(side.world, "allgemein"))
    body = case.body
    if body is not None:
        body = body.replace(b"{lotse}", lotse.encode())
        body = body.replace(b"{esk}", str(main_thread(side.world, "eskalation")).encode())
    # The thread's id with its four hyphens at the end: 36 characters, not canonical.
    moved = thread.replace("-", "") + "----"
    return attrs.evolve(case, body=body, path=case.path.replace("{MAIN}", moved))


async def test_the_fast_path_answers_as_litestar_does_and_stores_the_same() -> None:
    settings = Settings(max_body_bytes=MAX_BODY, rl_message_burst=len(CASES))
    fast = await _side(settings, fast=True)
    plain = await _side(settings, fast=False)
    assert main_thread(fast.world, "allgemein") == main_thread(plain.world, "allgemein")
    assert fast.recording is not None
    for case in CASES:
        answers = [await side.call(_resolved(case, side)) for side in (fast, plain)]
        assert answers[0] == answers[1], case.name
        assert answers[0].status == case.status, (case.name, answers[0].body)
        assert fast.recording.paths[-1] == case.expected, case.name
    tables = [side.services.uow.store.tables for side in (fast, plain)]  # type: ignore[attr-defined]
    assert tables[0].events == tables[1].events
    assert tables[0].messages == tables[1].messages
    assert tables[0].runs == tables[1].runs
    assert tables[0].followups == tables[1].followups


async def test_a_rate_limited_message_answers_429_on_both_paths() -> None:
    settings = Settings(max_body_bytes=MAX_BODY, rl_message_burst=1)
    sides = [await _side(settings, fast=True), await _side(settings, fast=False)]
    statuses = []
    for at in range(2):
        case = Case("burst", MESSAGES, FAST, 0, _json({"client_msg_id": f"r{at}", "content": "x"}))
        answers = [await side.call(case) for side in sides]
        assert answers[0] == answers[1]
        statuses.append(answers[0].status)
    assert statuses == [201, 429]
    assert sides[0].recording is not None
    assert sides[0].recording.paths == [FAST, FAST]


async def test_the_fast_path_names_the_route_template_for_the_log_and_the_metrics() -> None:
    side = await _side(Settings(), fast=True)
    seen: list[object] = []
    answered = side.app._answered

    def noting(scope: Scope, exchange: Any, seconds: float) -> None:
        seen.append(scope.get("path_template"))
        answered(scope, exchange, seconds)

    side.app._answered = noting  # type: ignore[method-assign]
    answer = await side.call(Case("plain", MESSAGES, FAST, 201, PLAIN))
    assert answer.status == 201
    assert seen == ["/v1/threads/{thread_id}/messages"]
    assert side.recording is not None
    assert side.recording.paths == [FAST]
