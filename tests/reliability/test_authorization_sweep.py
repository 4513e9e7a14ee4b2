"""Authorization sweep: every route of /openapi.json for every principal of the demo world.

The expected answer comes from one table of rules: owner-only administration; the level
a route needs on its target (computed with `turnkeeper.domain.authorization.effective_level`, the
same rule the server uses, over the world's grants); routes only the run's agent may
call; routes only agents may call. A NotFound must be identical (status and body apart
from correlation_id) to the answer for an unknown id. The red-team cases of the seeds
follow the sweep.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import pytest

from tests.support.http import PRINCIPALS, HttpWorld, http_world
from turnkeeper.application.demo import DemoWorld
from turnkeeper.domain.authorization import AccessTarget, effective_level
from turnkeeper.domain.events import EventType
from turnkeeper.domain.world import Level, PrincipalKind, ResourceKind, thread_target_key

#: Paths outside the sweep: operations routes without authentication.
UNAUTHENTICATED = frozenset({"/healthz", "/readyz", "/openapi.json"})
METHODS = ("get", "post", "put", "patch", "delete")


class Rule(enum.Enum):
    """Who may call a route."""

    ANYONE = "anyone"  # any authenticated principal
    OWNER = "owner"  # the space owner only (403 owner_required otherwise)
    LEVEL = "level"  # the level `needs` on the target (404 without read)
    RUN_AGENT = "run_agent"  # the run's agent (404 without read, else 403)
    AGENT_LEVEL = "agent_level"  # agents only (403 agents_only), then the level


@attrs.frozen(kw_only=True)
class Prepared:
    """A request made ready for one principal: the path and the body that would succeed."""

    path: str
    body: Any = None
    unknown_path: str | None = None  # the same request naming an id that does not exist
    unknown_body: Any = None


Prepare = Callable[[HttpWorld], Awaitable[Prepared]]


@attrs.frozen(kw_only=True)
class RouteCase:
    """One route: its rule, the level it needs, its success status and how to call it."""

    rule: Rule
    success: int
    prepare: Prepare
    needs: Level = Level.READ
    people_only: bool = False
    channel_target: bool = False  # the target is the Allgemein channel, not its main thread


UNKNOWN = "01900000-0000-7000-8000-0000000fffff"


def _sam(hw: HttpWorld) -> str:
    return str(hw.world.principal("sam").id)


async def _static(path: str, body: Any = None, unknown: str | None = None) -> Prepared:
    return Prepared(path=path, body=body, unknown_path=unknown)


def stream_route(path: str) -> Prepare:
    """A stream that ends at once: the process is shutting down, and nothing is readable.

    An in-memory client only hands over a complete answer, so the success of a stream is
    its 200 with an empty, completed body; the streaming itself is tested in
    tests/integration/http/test_http_live.py.
    """

    async def prepare(hw: HttpWorld) -> Prepared:
        hw.services.live.close()
        return Prepared(path=f"{path}?after={FAR_AFTER}")

    return prepare


#: A cursor beyond every event of the sweep.
FAR_AFTER = 10**12


def thread_route(suffix: str, body: Any = None) -> Prepare:
    async def prepare(hw: HttpWorld) -> Prepared:
        thread = hw.main_thread("allgemein")
        return Prepared(
            path=f"/v1/threads/{thread}{suffix}",
            body=body,
            unknown_path=f"/v1/threads/{UNKNOWN}{suffix}",
        )

    return prepare


def run_route(suffix: str, setup: str) -> Prepare:
    """A route on Lotse's run in Allgemein, brought to the state the call needs."""

    async def prepare(hw: HttpWorld) -> Prepared:
        run_id, token = await hw.trigger()
        lotse = hw.world.principal("lotse")
        body: Any = None
        if setup in ("running", "waiting", "patch"):
            await hw.services.runs.start(lotse, uuid.UUID(run_id), token)
        if setup == "waiting":
            await hw.services.runs.await_input(lotse, uuid.UUID(run_id))
            # Only the token of an answer delivered while the run waits resumes it.
            await hw.client.post(
                f"/v1/threads/{hw.main_thread('allgemein')}/messages",
                json={"client_msg_id": "answer", "content": "here you go"},
                headers=hw.headers("alex"),
            )
            page = await hw.services.runs.poll(lotse, after=0)
            (reply,) = [d for d in page.deliveries if d.event.type is EventType.AGENT_FOLLOWUP]
            body = {"invocation_token": reply.invocation_token}
        if setup == "queued":
            body = {"invocation_token": token}
        elif setup == "running" and suffix == "/finish":
            body = {"state": "completed"}
        elif setup == "running":
            body = {}
        elif setup == "patch":
            answer = await hw.client.post(
                f"/v1/threads/{hw.main_thread('allgemein')}/messages",
                json={"client_msg_id": "followup", "content": "and also"},
                headers=hw.headers("alex"),
            )
            followup_id = answer.json()["id"]
            run = await hw.services.runs.get(lotse, uuid.UUID(run_id))
            body = {
                "base_version": run.run.version,
                "ops": [
                    {
                        "op": "replace",
                        "path": f"/followups/{followup_id}/state",
                        "value": "delivered",
                    }
                ],
            }
        return Prepared(
            path=f"/v1/runs/{run_id}{suffix}", body=body, unknown_path=f"/v1/runs/{UNKNOWN}{suffix}"
        )

    return prepare


async def _grant_delete(hw: HttpWorld) -> Prepared:
    grant = await hw.services.admin.create_grant(
        hw.world.owner.principal,
        principal_id=hw.world.principal("sam").id,
        resource_kind=ResourceKind.CHANNEL,
        resource_id=hw.world.channels["eskalation"].id,
        level=Level.READ,
    )
    return Prepared(path=f"/v1/grants/{grant.id}")


async def _agent_send(hw: HttpWorld) -> Prepared:
    thread = hw.main_thread("allgemein")
    document = await hw.client.get(f"/v1/threads/{thread}", headers=hw.headers("robin"))
    body = {
        "target": str(thread),
        "content": "a note",
        "client_message_id": "send-1",
        "freshness": {
            "target_key": document.json()["target_key"],
            "seen_up_to_seq": document.json()["latest_seq"],
        },
    }
    unknown = {
        **body,
        "target": UNKNOWN,
        "freshness": {"target_key": thread_target_key(uuid.UUID(UNKNOWN)), "seen_up_to_seq": 0},
    }
    return Prepared(path="/v1/agent/send", body=body, unknown_body=unknown)


async def _token_delete(hw: HttpWorld) -> Prepared:
    sam = hw.world.principal("sam")
    issued = await hw.services.tokens.issue_token(hw.world.owner.principal, sam.id, label="sweep")
    return Prepared(path=f"/v1/principals/{sam.id}/tokens/{issued.token.id}")


def _channel(hw: HttpWorld, suffix: str) -> str:
    return f"/v1/channels/{hw.world.channels['allgemein'].id}{suffix}"


#: The table: one entry per operation of /openapi.json (the sweep fails on a new route).
ROUTES: dict[tuple[str, str], RouteCase] = {
    ("post", "/v1/principals"): RouteCase(
        rule=Rule.OWNER,
        success=201,
        prepare=lambda hw: _static("/v1/principals", {"kind": "person", "handle": "casey"}),
    ),
    ("post", "/v1/spaces"): RouteCase(
        rule=Rule.OWNER, success=201, prepare=lambda hw: _static("/v1/spaces", {"name": "Lab"})
    ),
    ("post", "/v1/spaces/{space_id}/channels"): RouteCase(
        rule=Rule.OWNER,
        success=201,
        prepare=lambda hw: _static(
            f"/v1/spaces/{hw.world.spaces['support'].id}/channels", {"name": "Lab", "type": "text"}
        ),
    ),
    ("put", "/v1/channels/{channel_id}/behavior"): RouteCase(
        rule=Rule.OWNER,
        success=200,
        prepare=lambda hw: _static(_channel(hw, "/behavior"), {"free_response": False}),
    ),
    ("put", "/v1/channels/{channel_id}/operator"): RouteCase(
        rule=Rule.OWNER,
        success=200,
        prepare=lambda hw: _static(_channel(hw, "/operator"), {"mode": "none"}),
    ),
    ("post", "/v1/channels/{channel_id}/archive"): RouteCase(
        rule=Rule.OWNER, success=200, prepare=lambda hw: _static(_channel(hw, "/archive"))
    ),
    ("post", "/v1/grants"): RouteCase(
        rule=Rule.OWNER,
        success=201,
        prepare=lambda hw: _static(
            "/v1/grants",
            {
                "principal_id": _sam(hw),
                "resource_kind": "channel",
                "resource_id": str(hw.world.channels["eskalation"].id),
                "level": "write",
            },
        ),
    ),
    ("delete", "/v1/grants/{grant_id}"): RouteCase(
        rule=Rule.OWNER, success=204, prepare=_grant_delete
    ),
    ("get", "/v1/grants"): RouteCase(
        rule=Rule.OWNER, success=200, prepare=lambda hw: _static("/v1/grants")
    ),
    ("post", "/v1/principals/{principal_id}/tokens"): RouteCase(
        rule=Rule.OWNER,
        success=201,
        prepare=lambda hw: _static(f"/v1/principals/{_sam(hw)}/tokens", {"label": "sweep"}),
    ),
    ("get", "/v1/principals/{principal_id}/tokens"): RouteCase(
        rule=Rule.OWNER,
        success=200,
        prepare=lambda hw: _static(f"/v1/principals/{_sam(hw)}/tokens"),
    ),
    ("delete", "/v1/principals/{principal_id}/tokens/{token_id}"): RouteCase(
        rule=Rule.OWNER, success=204, prepare=_token_delete
    ),
    ("put", "/v1/agents/{agent_id}/config"): RouteCase(
        rule=Rule.OWNER,
        success=200,
        prepare=lambda hw: _static(
            f"/v1/agents/{hw.world.principal('texter').id}/config", {"supports_followups": True}
        ),
    ),
    ("get", "/v1/me"): RouteCase(
        rule=Rule.ANYONE, success=200, prepare=lambda hw: _static("/v1/me")
    ),
    ("get", "/v1/events"): RouteCase(
        rule=Rule.ANYONE, success=200, prepare=lambda hw: _static("/v1/events")
    ),
    ("get", "/v1/events/stream"): RouteCase(
        rule=Rule.ANYONE, success=200, prepare=stream_route("/v1/events/stream")
    ),
    ("get", "/v1/agent/events/stream"): RouteCase(
        rule=Rule.AGENT_LEVEL,
        needs=Level.NONE,
        success=200,
        prepare=stream_route("/v1/agent/events/stream"),
    ),
    ("post", "/v1/channels/{channel_id}/threads"): RouteCase(
        rule=Rule.LEVEL,
        needs=Level.WRITE,
        channel_target=True,
        success=201,
        prepare=lambda hw: _static(
            _channel(hw, "/threads"),
            {"first_message": {"client_msg_id": "thread-1", "content": "news"}},
            f"/v1/channels/{UNKNOWN}/threads",
        ),
    ),
    ("get", "/v1/threads/{thread_id}/messages"): RouteCase(
        rule=Rule.LEVEL, success=200, prepare=thread_route("/messages")
    ),
    ("post", "/v1/threads/{thread_id}/messages"): RouteCase(
        rule=Rule.LEVEL,
        needs=Level.WRITE,
        success=201,
        prepare=thread_route("/messages", {"client_msg_id": "m-1", "content": "hello"}),
    ),
    ("get", "/v1/threads/{thread_id}"): RouteCase(
        rule=Rule.LEVEL, success=200, prepare=thread_route("")
    ),
    ("post", "/v1/threads/{thread_id}/close"): RouteCase(
        rule=Rule.LEVEL,
        needs=Level.WRITE,
        people_only=True,
        success=200,
        prepare=thread_route("/close"),
    ),
    ("get", "/v1/runs/{run_id}"): RouteCase(
        rule=Rule.LEVEL, success=200, prepare=run_route("", "queued-no-body")
    ),
    ("post", "/v1/runs/{run_id}/cancel"): RouteCase(
        rule=Rule.LEVEL,
        needs=Level.TRIGGER,
        people_only=True,
        success=200,
        prepare=run_route("/cancel", "queued-no-body"),
    ),
    ("patch", "/v1/runs/{run_id}"): RouteCase(
        rule=Rule.RUN_AGENT, success=200, prepare=run_route("", "patch")
    ),
    ("post", "/v1/runs/{run_id}/start"): RouteCase(
        rule=Rule.RUN_AGENT, success=200, prepare=run_route("/start", "queued")
    ),
    ("post", "/v1/runs/{run_id}/await-input"): RouteCase(
        rule=Rule.RUN_AGENT, success=200, prepare=run_route("/await-input", "running")
    ),
    ("post", "/v1/runs/{run_id}/resume"): RouteCase(
        rule=Rule.RUN_AGENT, success=200, prepare=run_route("/resume", "waiting")
    ),
    ("post", "/v1/runs/{run_id}/finish"): RouteCase(
        rule=Rule.RUN_AGENT, success=200, prepare=run_route("/finish", "running")
    ),
    ("get", "/v1/agent/events"): RouteCase(
        rule=Rule.AGENT_LEVEL,
        needs=Level.NONE,
        success=200,
        prepare=lambda hw: _static("/v1/agent/events"),
    ),
    ("post", "/v1/agent/events/ack"): RouteCase(
        rule=Rule.AGENT_LEVEL,
        needs=Level.NONE,
        success=204,
        prepare=lambda hw: _static("/v1/agent/events/ack", {"through_seq": 0}),
    ),
    ("put", "/v1/agent/heartbeat"): RouteCase(
        rule=Rule.AGENT_LEVEL,
        needs=Level.NONE,
        success=204,
        prepare=lambda hw: _static("/v1/agent/heartbeat", {"capabilities": {}}),
    ),
    ("post", "/v1/agent/send"): RouteCase(
        rule=Rule.AGENT_LEVEL, needs=Level.WRITE, success=200, prepare=_agent_send
    ),
}


async def _level(hw: HttpWorld, handle: str, channel_target: bool) -> Level:
    principal = hw.world.principal(handle)
    async with hw.services.uow() as uow:
        grants = await uow.grants.for_principal(principal.id)
        thread = None if channel_target else await uow.threads.get(hw.main_thread("allgemein"))
    world: DemoWorld = hw.world
    target = AccessTarget(
        space=world.spaces["support"], channel=world.channels["allgemein"], thread=thread
    )
    return effective_level(principal, target, grants)


def expected(case: RouteCase, handle: str, kind: PrincipalKind, level: Level) -> tuple[int, str]:
    """The answer the table of rules expects: status and problem code (or ``ok``)."""
    if case.rule is Rule.ANYONE:
        return case.success, "ok"
    if case.rule is Rule.OWNER:
        return (case.success, "ok") if handle == "robin" else (403, "forbidden")
    if case.rule is Rule.AGENT_LEVEL:
        if kind is not PrincipalKind.AGENT:
            return 403, "forbidden"
        if case.needs > Level.NONE and level < Level.READ:
            return 404, "not_found"
        return (case.success, "ok") if level >= case.needs else (403, "forbidden")
    if level < Level.READ:
        return 404, "not_found"
    if case.rule is Rule.RUN_AGENT:
        return (case.success, "ok") if handle == "lotse" else (403, "forbidden")
    if case.people_only and kind is not PrincipalKind.PERSON:
        return 403, "forbidden"
    return (case.success, "ok") if level >= case.needs else (403, "forbidden")


async def _operations() -> list[tuple[str, str]]:
    async with http_world() as hw:
        spec = hw.client.spec
    return [
        (method, path)
        for path, item in spec["paths"].items()
        if path not in UNAUTHENTICATED
        for method in METHODS
        if method in item
    ]


async def test_the_table_covers_every_route_of_the_openapi_document() -> None:
    assert set(await _operations()) == set(ROUTES)


def _without_correlation(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != "correlation_id"}


@pytest.mark.parametrize(("method", "path"), sorted(ROUTES), ids=lambda v: str(v))
async def test_every_principal_gets_the_answer_of_the_rules(method: str, path: str) -> None:
    case = ROUTES[(method, path)]
    mismatches: list[str] = []
    for handle in PRINCIPALS:
        async with http_world() as hw:
            prepared = await case.prepare(hw)
            principal = hw.world.principal(handle)
            level = await _level(hw, handle, case.channel_target)
            status, code = expected(case, handle, principal.kind, level)
            kwargs: dict[str, Any] = {"headers": hw.headers(handle)}
            if prepared.body is not None:
                kwargs["json"] = prepared.body
            answer = await hw.client.request(method.upper(), prepared.path, **kwargs)
            got_code = "ok" if answer.status_code < 300 else answer.json()["code"]
            if (answer.status_code, got_code) != (status, code):
                mismatches.append(
                    f"{handle}: expected {status} {code}, got {answer.status_code} {answer.text}"
                )
                continue
            if status == 403:
                assert answer.json().get("reason"), answer.text
            if status == 404:
                unknown_kwargs = dict(kwargs)
                if prepared.unknown_body is not None:
                    unknown_kwargs["json"] = prepared.unknown_body
                unknown = await hw.client.request(
                    method.upper(), prepared.unknown_path or prepared.path, **unknown_kwargs
                )
                assert unknown.status_code == 404
                assert _without_correlation(answer.json()) == _without_correlation(unknown.json())
                assert answer.headers["content-type"] == unknown.headers["content-type"]
    assert mismatches == []


# -- red team --------------------------------------------------------------------------------


async def test_confused_deputy_through_run_id_gets_one_uniform_answer() -> None:
    async with http_world() as hw:
        run_id, token = await hw.trigger()
        await hw.services.runs.start(hw.world.principal("lotse"), uuid.UUID(run_id), token)
        allgemein = hw.main_thread("allgemein")
        before = hw.stored()
        # Texter (write on Allgemein) names Lotse's run; Lotse names its own run in a
        # thread of another channel; Lotse names a run that does not exist.
        other = await hw.client.post(
            f"/v1/channels/{hw.world.channels['reports'].id}/threads",
            json={"first_message": {"client_msg_id": "r-1", "content": "report"}},
            headers=hw.headers("lotse"),
        )
        assert other.status_code == 201
        before = hw.stored()
        attempts = [
            ("texter", allgemein, run_id),
            ("lotse", other.json()["thread"]["id"], run_id),
            ("lotse", allgemein, UNKNOWN),
        ]
        bodies = []
        for n, (who, thread, named) in enumerate(attempts):
            answer = await hw.client.post(
                f"/v1/threads/{thread}/messages",
                json={"client_msg_id": f"deputy-{n}", "content": "on behalf", "run_id": named},
                headers=hw.headers(who),
            )
            assert answer.status_code == 400
            bodies.append(_without_correlation(answer.json()))
        assert bodies[0] == bodies[1] == bodies[2]
        assert bodies[0]["errors"] == [{"pointer": "/run_id", "code": "run_mismatch"}]
        # A person naming a run is refused the same way.
        person = await hw.client.post(
            f"/v1/threads/{allgemein}/messages",
            json={"client_msg_id": "deputy-p", "content": "x", "run_id": run_id},
            headers=hw.headers("alex"),
        )
        assert person.status_code == 400
        assert hw.stored() == before


async def test_follow_ups_of_others_never_reach_a_personal_agent() -> None:
    async with http_world() as hw:
        robin = hw.world.owner.principal
        assistent = hw.world.principal("assistent")
        sam = hw.world.principal("sam")
        await hw.services.admin.create_grant(
            robin,
            principal_id=sam.id,
            resource_kind=ResourceKind.SPACE,
            resource_id=hw.world.spaces["research"].id,
            level=Level.TRIGGER,
        )
        await hw.services.runs.heartbeat(assistent, "steer")
        notizen = hw.main_thread("notizen")
        own = await hw.client.post(
            f"/v1/threads/{notizen}/messages",
            json={"client_msg_id": "own", "content": "x", "mentions": [str(assistent.id)]},
            headers=hw.headers("robin"),
        )
        assert own.status_code == 201
        page = await hw.services.runs.poll(assistent)
        (invocation,) = page.deliveries
        assert invocation.invocation_token is not None
        run_id = uuid.UUID(str(invocation.event.payload["run_id"]))
        await hw.services.runs.start(assistent, run_id, invocation.invocation_token)
        sams = []
        for n, mentions in enumerate([[str(assistent.id)], []]):
            answer = await hw.client.post(
                f"/v1/threads/{notizen}/messages",
                json={"client_msg_id": f"sam-{n}", "content": "psst", "mentions": mentions},
                headers=hw.headers("sam"),
            )
            assert answer.status_code == 201
            sams.append(answer.json())
        history = await hw.client.get(
            f"/v1/threads/{notizen}/messages", headers=hw.headers("robin")
        )
        stored = {m["id"]: m for m in history.json()["messages"]}
        assert stored[sams[0]["id"]]["trigger_state"] == "failed"
        assert stored[sams[0]["id"]]["trigger_state_reason"] == "billing_mode_personal_not_holder"
        assert "trigger_state" not in stored[sams[1]["id"]]
        run = await hw.services.runs.get(robin, run_id)
        assert run.followups == {}
        # Robin's own follow-up is a row and an event; nothing of Sam's reaches the agent,
        # not now and not when the run ends.
        mine = await hw.client.post(
            f"/v1/threads/{notizen}/messages",
            json={"client_msg_id": "own-2", "content": "more", "mentions": [str(assistent.id)]},
            headers=hw.headers("robin"),
        )
        await hw.services.runs.finish(assistent, run_id, _completed(), None)
        page = await hw.services.runs.poll(assistent, after=0)
        delivered = {str(d.event.payload.get("message_id")) for d in page.deliveries}
        assert mine.json()["id"] in delivered
        assert not delivered & {s["id"] for s in sams}
        store = hw.services.uow.store  # type: ignore[attr-defined]
        personal = [e for e in store.tables.events if e.audience_id == assistent.id]
        assert not {str(e.payload.get("message_id")) for e in personal} & {s["id"] for s in sams}


def _completed() -> Any:
    from turnkeeper.domain.runs import RunState

    return RunState.COMPLETED


async def test_no_agent_triggers_an_agent_through_any_path() -> None:
    async with http_world() as hw:
        lotse = hw.world.principal("lotse")
        texter = hw.world.principal("texter")
        allgemein = hw.main_thread("allgemein")
        mention_all = [str(lotse.id), str(texter.id)]
        # createMessage with mentions, by a guest agent and by the operator itself.
        for who in ("texter", "lotse"):
            answer = await hw.client.post(
                f"/v1/threads/{allgemein}/messages",
                json={"client_msg_id": f"{who}-m", "content": "@all", "mentions": mention_all},
                headers=hw.headers(who),
            )
            assert answer.status_code == 201, answer.text
            assert "trigger_state" not in answer.json()
        # createThread by an agent in a forum whose operator it is, mentioning agents.
        created = await hw.client.post(
            f"/v1/channels/{hw.world.channels['bulletin'].id}/threads",
            json={
                "first_message": {"client_msg_id": "b-1", "content": "hi", "mentions": mention_all}
            },
            headers=hw.headers("lotse"),
        )
        assert created.status_code == 201, created.text
        assert "trigger_state" not in created.json()["message"]
        # The runtime send route.
        sent = await hw.client.post(
            "/v1/agent/send", json=(await _agent_send(hw)).body, headers=hw.headers("texter")
        )
        assert sent.status_code == 200, sent.text
        store = hw.services.uow.store  # type: ignore[attr-defined]
        assert store.tables.runs == {}
        assert not [e for e in store.tables.events if e.type is EventType.AGENT_INVOCATION]


async def test_a_superseded_token_no_longer_resumes() -> None:
    async with http_world() as hw:
        lotse = hw.world.principal("lotse")
        run_id, start_token = await hw.trigger()
        await hw.services.runs.start(lotse, uuid.UUID(run_id), start_token)
        await hw.services.runs.await_input(lotse, uuid.UUID(run_id))
        await hw.client.post(
            f"/v1/threads/{hw.main_thread('allgemein')}/messages",
            json={"client_msg_id": "answer", "content": "here you go"},
            headers=hw.headers("alex"),
        )
        page = await hw.services.runs.poll(lotse, after=0)
        followup = [d for d in page.deliveries if d.event.type is EventType.AGENT_FOLLOWUP][-1]
        replay = await hw.client.post(
            f"/v1/runs/{run_id}/resume",
            json={"invocation_token": start_token},
            headers=hw.headers("lotse"),
        )
        assert (replay.status_code, replay.json()["code"], replay.json().get("reason")) == (
            403,
            "invocation_token_invalid",
            "superseded",
        )
        assert start_token not in replay.text
        fresh = await hw.client.post(
            f"/v1/runs/{run_id}/resume",
            json={"invocation_token": followup.invocation_token},
            headers=hw.headers("lotse"),
        )
        assert (fresh.status_code, fresh.json()["state"]) == (200, "running")


async def test_the_token_of_one_run_does_not_start_another() -> None:
    async with http_world() as hw:
        first_run, first_token = await hw.trigger("allgemein", "a")
        second_run, second_token = await hw.trigger("eskalation", "b")
        before = hw.stored()
        crossed = await hw.client.post(
            f"/v1/runs/{second_run}/start",
            json={"invocation_token": first_token},
            headers=hw.headers("lotse"),
        )
        assert (crossed.status_code, crossed.json()["code"]) == (403, "invocation_token_invalid")
        assert first_token not in crossed.text
        assert hw.stored() == before
        own = await hw.client.post(
            f"/v1/runs/{second_run}/start",
            json={"invocation_token": second_token},
            headers=hw.headers("lotse"),
        )
        assert own.status_code == 200
        assert first_run != second_run
