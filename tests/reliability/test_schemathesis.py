"""Schemathesis against /openapi.json: stateful runs along the links, and every operation alone.

The application runs in-process (ASGI) over the memory services; every scenario and every
stateless example starts from its own store with the demo world and a seed conversation
(Alex, Robin and Sam have triggered Lotse, Assistent and Texter; Robin has granted Sam
read on Notizen), so that an answer depends only on the steps of its own scenario and
Hypothesis can replay and shrink it.

- Stateful: the state machine schemathesis builds from the OpenAPI links of the document
  (turnkeeper/adapters/http/openapi_links.py) chains requests with the ids, versions and invocation
  tokens of earlier answers. A rule of the machine switches the caller between every
  principal of the demo world, an anonymous caller and the caller each step is meant for,
  so one scenario mixes people, agents and the owner (Robin writes, Lotse polls and
  starts the run with the delivery's token, Sam is refused on the way).
- Stateless: every operation of the document with positive and negative data, as a
  caller drawn from the same principals, with path ids drawn from the world or generated.

Every answer must pass: not_a_server_error (no 5xx), status_code_conformance (the status
is documented), content_type_conformance, response_schema_conformance (the body matches
the document), no JSON null anywhere, no problem body that holds a token (of any
principal, or an invocation token) or the content sent (the marker appended to every
``content``, ``question`` and ``title`` of a request), and every pointer of a 400 names a
member (or query parameter) that was sent.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any, cast

import attrs
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, rule
from schemathesis import Case as GenericCase
from schemathesis import CheckContext, GenerationMode, Response
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.generation.stateful import APIStateMachine

from tests.support.fakes import TEST_KEY, FakeClock, SequentialIds
from tests.support.http import PRINCIPALS
from tests.support.openapi import assert_no_null
from turnkeeper.adapters.http import create_app
from turnkeeper.adapters.memory import MemoryUnitOfWorkFactory
from turnkeeper.adapters.memory.store import MemoryStore
from turnkeeper.adapters.tokens import JwtSigner
from turnkeeper.application.bootstrap import Services, build_services
from turnkeeper.application.demo import DemoWorld, build_demo_world
from turnkeeper.application.settings import Settings
from turnkeeper.domain.events import EventType
from turnkeeper.domain.messaging import MessageDraft
from turnkeeper.domain.world import Level, ResourceKind

#: Stateful scenarios (Hypothesis examples of the state machine) and the most steps of one.
STATEFUL_SCENARIOS = 300
STATEFUL_STEPS = 30
#: Hypothesis examples per operation of the stateless run (positive and negative data).
STATELESS_EXAMPLES = 30
#: The example sequence is fixed, so CI sees the same run every time. Fixed for a given
#: code base and test selection: Hypothesis mixes in string constants of the project's
#: modules loaded in the process, so a change elsewhere in the code, or running this file
#: alone, can give another sequence (MUST_REACH holds for any of them).
DERANDOMIZE = True
#: Every example builds its own world (slow by Hypothesis's measure), and negative data
#: is impossible for an operation without parameters (those draws are filtered).
SUPPRESSED = [HealthCheck.too_slow, HealthCheck.filter_too_much]
#: Appended to every content sent; it must never come back in a problem.
MARKER = "SCHEMATHESIS-MARKER-example.com"
#: Request members that carry content (message content, a question, a thread title).
CONTENT_MEMBERS = frozenset({"content", "question", "title"})
#: Problem codes whose pointer names a member (or query parameter) of the request.
POINTED_CODES = frozenset({"unknown_member", "invalid_type", "invalid_enum", "duplicate_member"})
#: Answer members that carry a token (a new principal's token, an invocation token).
TOKEN_MEMBERS = frozenset({"token", "invocation_token"})
#: The caller without a token of the world (what schemathesis generates, or nothing).
ANONYMOUS = "anonymous"
#: The caller each step is meant for: the run's agent on the routes of runs and of the
#: agent runtime, the owner (Robin, who may do everything) elsewhere. Random callers
#: mostly meet 403 and 404; this one lets a scenario go deep (a run started, answered
#: and finished), while the others show what each principal gets on the way.
NATURAL = "natural"
#: First the natural caller: Hypothesis's simplest choice, and where shrinking goes.
CALLERS = (NATURAL, *PRINCIPALS, ANONYMOUS)
#: The caller of the next steps of a scenario: the natural one about half of the time,
#: else any of `CALLERS`. With every caller equally likely, a chain that needs the right
#: principal at each step (an agent polls, then starts the run it was given) was reached
#: a few times in 300 scenarios; weighted, it is reached about twenty times, and every
#: principal still gets its 2xx answers and its refusals.
CALLER = st.just(NATURAL) | st.sampled_from(CALLERS)
#: Routes of a run that only its agent may call.
RUN_AGENT_ROUTES = frozenset(
    {
        "/v1/runs/{run_id}/start",
        "/v1/runs/{run_id}/await-input",
        "/v1/runs/{run_id}/resume",
        "/v1/runs/{run_id}/finish",
    }
)
#: The agents the seed conversation triggers, one run each.
SEED_RUNS = ("lotse", "assistent", "texter")
#: The rate limit of messages is not what this run explores: no scenario reaches it.
MESSAGE_BURST = 1_000_000

#: Every operation of the document (a test checks this is every operation).
OPERATIONS = (
    "POST /v1/principals",
    "POST /v1/spaces",
    "POST /v1/spaces/{space_id}/channels",
    "PUT /v1/channels/{channel_id}/behavior",
    "PUT /v1/channels/{channel_id}/operator",
    "POST /v1/channels/{channel_id}/archive",
    "POST /v1/grants",
    "DELETE /v1/grants/{grant_id}",
    "GET /v1/grants",
    "POST /v1/principals/{principal_id}/tokens",
    "GET /v1/principals/{principal_id}/tokens",
    "DELETE /v1/principals/{principal_id}/tokens/{token_id}",
    "PUT /v1/agents/{agent_id}/config",
    "GET /v1/me",
    "POST /v1/channels/{channel_id}/threads",
    "GET /v1/threads/{thread_id}/messages",
    "POST /v1/threads/{thread_id}/messages",
    "GET /v1/threads/{thread_id}",
    "POST /v1/threads/{thread_id}/close",
    "GET /v1/events",
    "GET /v1/runs/{run_id}",
    "PATCH /v1/runs/{run_id}",
    "POST /v1/runs/{run_id}/cancel",
    "POST /v1/runs/{run_id}/start",
    "POST /v1/runs/{run_id}/await-input",
    "POST /v1/runs/{run_id}/resume",
    "POST /v1/runs/{run_id}/finish",
    "GET /v1/agent/events",
    "POST /v1/agent/events/ack",
    "PUT /v1/agent/heartbeat",
    "POST /v1/agent/send",
    "GET /healthz",
    "GET /readyz",
)

#: The stream routes: in the document, but not fuzzed (an answer that never ends).
STREAM_PATHS = ("/v1/events/stream", "/v1/agent/events/stream")

#: Answers the stateful run must reach, so that a machine that stopped following the
#: links (a renamed route, a broken expression) fails instead of passing on 404s: a thread
#: from the event feed, a run and its invocation token from the agent feed, a run started
#: with that token. Only answers that every example sequence reaches many times are
#: listed (see `DERANDOMIZE`).
MUST_REACH = frozenset(
    {
        ("GET /v1/events", 200),
        ("GET /v1/threads/{thread_id}", 200),
        ("GET /v1/threads/{thread_id}/messages", 200),
        ("POST /v1/threads/{thread_id}/close", 200),
        ("GET /v1/agent/events", 200),
        ("POST /v1/agent/events/ack", 204),
        ("POST /v1/runs/{run_id}/start", 200),
        ("GET /v1/runs/{run_id}", 200),
        ("POST /v1/spaces", 201),
        ("POST /v1/channels/{channel_id}/archive", 200),
        ("PUT /v1/channels/{channel_id}/behavior", 200),
        ("POST /v1/threads/{thread_id}/messages", 201),
    }
)

#: A case of any operation.
Case = GenericCase[Any]

BUILTIN_CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


# -- the scenario world -----------------------------------------------------------------------


@attrs.define
class Scenario:
    """The world of one scenario.

    Attributes:
        world: the demo world.
        runs: the runs of the seed conversation.
        grants: the grant of the seed.
        secrets: every token handed out so far; no problem may hold one.
        agent: the agent the natural caller plays on agent routes (the last one named).
    """

    world: DemoWorld
    runs: list[uuid.UUID]
    grants: list[uuid.UUID]
    secrets: set[str] = attrs.Factory(set)
    agent: str = "lotse"

    def token(self, caller: str) -> str | None:
        """The bearer token of a caller (None for the anonymous one)."""
        if caller == ANONYMOUS:
            return None
        return (self.world.people.get(caller) or self.world.agents[caller]).token

    def natural(self, case: Case, store: MemoryStore) -> str:
        """The principal a step is meant for (see `NATURAL`).

        The agent is the one of the run the request names, else the last one named.
        """
        body = case.body if isinstance(case.body, dict) else {}
        for raw in ((case.path_parameters or {}).get("run_id"), body.get("run_id")):
            run_id = _uuid(raw)
            run = store.tables.runs.get(run_id) if run_id is not None else None
            if run is not None:
                self.agent = next(
                    h for h, a in self.world.agents.items() if a.principal.id == run.agent_id
                )
        path = case.operation.path
        is_agent_route = path.startswith("/v1/agent/") or path in RUN_AGENT_ROUTES
        is_patch = (case.method.lower(), path) == ("patch", "/v1/runs/{run_id}")
        return self.agent if is_agent_route or is_patch else "robin"

    def ids(self, parameter: str) -> list[str]:
        """Ids of the world for a path parameter (empty when the world has none)."""
        world = self.world
        found: dict[str, list[uuid.UUID]] = {
            "space_id": [s.id for s in world.spaces.values()],
            "channel_id": [c.id for c in world.channels.values()],
            "thread_id": [c.main_thread_id for c in world.channels.values() if c.main_thread_id],
            "run_id": self.runs,
            "grant_id": self.grants,
            "agent_id": [a.principal.id for a in world.agents.values()],
            "principal_id": [
                p.principal.id for p in (*world.people.values(), *world.agents.values())
            ],
        }
        return [str(i) for i in found.get(parameter, [])]


def _uuid(raw: object) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(raw))
    except ValueError:
        return None


@attrs.define
class Api:
    """One application over one set of services; `fresh` gives it a new store."""

    services: Services
    schema: schemathesis.BaseSchema

    @property
    def store(self) -> MemoryStore:
        """The store of the current scenario."""
        store: MemoryStore = self.services.uow.store  # type: ignore[attr-defined]
        return store

    def fresh(self) -> Scenario:
        """A new store holding only the demo world and the seed conversation."""
        # Each unit of work reads the factory's store, so a new one empties everything at
        # once; the application stays (building one costs more than a whole scenario).
        self.services.uow.store = MemoryStore()  # type: ignore[attr-defined]
        return asyncio.run(_seed(self.services))


async def _seed(services: Services) -> Scenario:
    world = await build_demo_world(services)
    conversation, runs = services.conversation, services.runs
    alex, robin, sam = (world.principal(h) for h in ("alex", "robin", "sam"))

    def mention(handle: str, cid: str, content: str) -> MessageDraft:
        return MessageDraft(
            client_msg_id=cid, content=content, mentions=(world.principal(handle).id,)
        )

    allgemein, notizen = (world.channels[c].main_thread_id for c in ("allgemein", "notizen"))
    assert allgemein is not None
    assert notizen is not None
    await conversation.create_message(alex, allgemein, mention("lotse", "seed-1", "help"))
    await conversation.create_message(robin, notizen, mention("assistent", "seed-2", "note"))
    await conversation.create_thread(
        sam,
        world.channels["ideas"].id,
        title="Idea",
        first_message=mention("texter", "seed-3", "an idea"),
    )
    grant = await services.admin.create_grant(
        robin,
        principal_id=sam.id,
        resource_kind=ResourceKind.CHANNEL,
        resource_id=world.channels["notizen"].id,
        level=Level.READ,
    )
    invocations = [
        delivery
        for agent in SEED_RUNS
        for delivery in (await runs.poll(world.principal(agent), after=0)).deliveries
        if delivery.event.type is EventType.AGENT_INVOCATION
    ]
    assert len(invocations) == len(SEED_RUNS), "every seed message triggered its agent"
    scenario = Scenario(
        world=world,
        runs=[uuid.UUID(str(d.event.payload["run_id"])) for d in invocations],
        grants=[grant.id],
    )
    scenario.secrets |= {p.token for p in [*world.people.values(), *world.agents.values()]}
    scenario.secrets |= {d.invocation_token for d in invocations if d.invocation_token}
    return scenario


class ImmediateWaker:
    """Long-polls answer at once here: every wait times out immediately.

    A long-poll then reads once per ``stream.heartbeat_seconds`` step of its ``wait`` and
    answers; the wake-ups themselves are tested in tests/integration/test_live_delivery.
    """

    @contextlib.contextmanager
    def listen(self, feed: uuid.UUID | None) -> Iterator[ImmediateWaker]:
        yield self

    async def wait(self, at_most: object) -> bool:
        return False

    generation = 0
    closed = False

    def close(self) -> None:
        return None


@pytest.fixture(scope="module")
def api() -> Api:
    services = build_services(
        MemoryUnitOfWorkFactory(),
        Settings(rl_message_burst=MESSAGE_BURST),
        FakeClock(),
        SequentialIds(),
        JwtSigner(TEST_KEY),
        waker=ImmediateWaker(),
    )
    app = create_app(services, services.settings)
    config = schemathesis.Config.from_dict(
        {
            # Only the links of the document: schemathesis would otherwise add links it
            # infers from the schemas.
            "phases": {"stateful": {"inference": {"algorithms": []}}},
            # Schemathesis would mix in string constants it finds in the modules loaded in
            # the process, which depend on the other tests of the run: the examples would
            # not be the same from one run to the next.
            "analysis": {"constants": {"enabled": False}},
        }
    )
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, config=config)
    # A stream never ends by itself; tests/integration/http/test_http_live.py covers them.
    return Api(services=services, schema=schema.exclude(path=list(STREAM_PATHS)))


# -- what is sent, and the checks of every answer ------------------------------------------------


def mark_content(value: Any) -> None:
    """Append `MARKER` to every content member of a request body, in place."""
    if isinstance(value, dict):
        for key, member in value.items():
            if key in CONTENT_MEMBERS and isinstance(member, str):
                value[key] = member + MARKER
            else:
                mark_content(member)
    elif isinstance(value, list):
        for item in value:
            mark_content(item)


def _tokens_in(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for key, member in value.items():
            if key in TOKEN_MEMBERS and isinstance(member, str) and member:
                yield member
            else:
                yield from _tokens_in(member)
    elif isinstance(value, list):
        for item in value:
            yield from _tokens_in(item)


def _json(response: Response) -> Any:
    if not response.content:
        return None
    content_type = next(
        (v[0] for k, v in response.headers.items() if k.lower() == "content-type" and v), ""
    )
    if "json" not in content_type:
        return None
    return json.loads(response.content)


def _sent_body(response: Response) -> Any:
    raw = response.request.body
    if not isinstance(raw, (bytes, str)) or not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


def resolves(document: Any, pointer: str) -> bool:
    """Whether a JSON pointer (RFC 6901) names a value of the document."""
    if pointer == "":
        return True
    current = document
    for raw in pointer[1:].split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(current, dict) and token in current:
            current = current[token]
        elif isinstance(current, list) and token.isdigit() and int(token) < len(current):
            current = current[int(token)]
        else:
            return False
    return True


def remember_tokens(scenario: Scenario, response: Response) -> None:
    """Add the tokens an answer hands out (a new principal's, an invocation token)."""
    if 200 <= response.status_code < 300:
        scenario.secrets |= set(_tokens_in(_json(response)))


def checks_for(scenario: Scenario) -> list[Callable[[CheckContext, Response, Case], bool | None]]:
    """The checks of every answer in one scenario (the secrets grow as it runs)."""

    def no_json_null(ctx: CheckContext, response: Response, case: Case) -> bool | None:
        body = _json(response)
        if body is not None:
            assert_no_null(body)
        return None

    def problems_hold_no_token_or_content(
        ctx: CheckContext, response: Response, case: Case
    ) -> bool | None:
        if response.status_code < 400:
            return None
        text = response.content.decode("utf-8", errors="replace")
        assert MARKER not in text, "a problem holds content sent in a request"
        assert not [s for s in scenario.secrets if s in text], "a problem holds a token"
        return None

    def pointers_name_what_was_sent(
        ctx: CheckContext, response: Response, case: Case
    ) -> bool | None:
        body = _json(response) if response.status_code == 400 else None
        if not isinstance(body, dict):
            return None
        sent = _sent_body(response)
        for error in body.get("errors", []):
            pointer = error["pointer"]
            if error["code"] not in POINTED_CODES:
                continue
            # A query parameter's pointer is its name as one token (RFC 6901 escapes).
            name = pointer[1:].replace("~1", "/").replace("~0", "~")
            in_query = pointer.count("/") == 1 and name in (case.query or {})
            assert in_query or resolves(sent, pointer), f"{error} names nothing that was sent"
        return None

    return [
        *BUILTIN_CHECKS,
        no_json_null,
        problems_hold_no_token_or_content,
        pointers_name_what_was_sent,
    ]


# -- stateful -----------------------------------------------------------------------------------


class _Callers(APIStateMachine):
    """Mixed into the generated machine: a scenario world, the caller, the checks."""

    api: Api
    reached: collections.Counter[tuple[str, int, str]]
    caller: str = NATURAL
    acting: str = NATURAL

    def setup(self) -> None:
        """A fresh world for every scenario."""
        self.scenario = self.api.fresh()

    @initialize(handle=CALLER)
    def start_as(self, handle: str) -> None:
        """The first caller of the scenario."""
        self.caller = handle

    @rule(handle=CALLER)
    def act_as(self, handle: str) -> None:
        """The following steps are made by another caller."""
        self.caller = handle

    def before_call(self, case: Case) -> None:
        """Mark the content the step sends."""
        mark_content(case.body)

    def get_call_kwargs(self, case: Case) -> dict[str, Any]:
        """The caller's bearer token (the anonymous caller keeps what was generated)."""
        self.acting = self.caller
        if self.caller == NATURAL:
            self.acting = self.scenario.natural(case, self.api.store)
        token = self.scenario.token(self.acting)
        return {} if token is None else {"headers": {"Authorization": f"Bearer {token}"}}

    def validate_response(
        self,
        response: Response,
        case: Case,
        additional_checks: list[Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Every check of `checks_for`, then count the answer."""
        remember_tokens(self.scenario, response)
        case.validate_response(
            response, checks=checks_for(self.scenario), transport_kwargs=kwargs or None
        )
        self.reached[(case.operation.label, response.status_code, self.acting)] += 1


@pytest.mark.slow
def test_stateful_runs_along_the_links_as_every_principal(api: Api) -> None:
    reached: collections.Counter[tuple[str, int, str]] = collections.Counter()
    generated = api.schema.as_state_machine()
    # The generated class is only known at run time: the mixin goes in front of it.
    machine = cast(
        "type[APIStateMachine]",
        type("Workflow", (_Callers, generated), {"api": api, "reached": reached}),
    )
    machine.run(
        settings=settings(
            max_examples=STATEFUL_SCENARIOS,
            stateful_step_count=STATEFUL_STEPS,
            derandomize=DERANDOMIZE,
            deadline=None,
            database=None,
            phases=[Phase.generate, Phase.shrink],
            suppress_health_check=SUPPRESSED,
        )
    )
    answered: collections.Counter[tuple[str, int]] = collections.Counter()
    for (operation, status, _), count in reached.items():
        answered[(operation, status)] += count
    assert set(answered) >= MUST_REACH, (
        sorted(MUST_REACH - set(answered)),
        sorted(answered.items()),
    )
    succeeded = {caller for _, status, caller in reached if 200 <= status < 300}
    assert succeeded >= set(PRINCIPALS), sorted(set(PRINCIPALS) - succeeded)
    assert any(caller == ANONYMOUS and status == 401 for _, status, caller in reached)


# -- stateless ----------------------------------------------------------------------------------


@pytest.mark.parametrize("label", OPERATIONS)
def test_every_operation_alone_as_every_principal(api: Api, label: str) -> None:
    operation = api.schema.find_operation_by_label(label)
    assert operation is not None, label

    @settings(
        max_examples=STATELESS_EXAMPLES,
        derandomize=DERANDOMIZE,
        deadline=None,
        database=None,
        suppress_health_check=SUPPRESSED,
    )
    @given(data=st.data())
    def example(data: st.DataObject) -> None:
        scenario = api.fresh()
        mode = data.draw(st.sampled_from(list(GenerationMode)), label="mode")
        case = data.draw(operation.as_strategy(generation_mode=mode), label="case")
        for name in case.path_parameters or {}:
            known = scenario.ids(name)
            if known and bool(data.draw(st.booleans(), label=f"known {name}")):
                case.path_parameters[name] = data.draw(st.sampled_from(known), label=name)
        caller = data.draw(st.sampled_from(CALLERS), label="caller")
        if caller == NATURAL:
            caller = scenario.natural(case, api.store)
        token = scenario.token(caller)
        headers = None if token is None else {"Authorization": f"Bearer {token}"}
        mark_content(case.body)
        response = case.call(headers=headers)
        remember_tokens(scenario, response)
        case.validate_response(response, checks=checks_for(scenario), headers=headers)

    example()


def _answer(real: Response, status: int, body: Any) -> Response:
    media = "application/problem+json" if status >= 400 else "application/json"
    return Response(
        status_code=status,
        headers={"content-type": [media]},
        content=json.dumps(body).encode(),
        request=real.request,
        elapsed=0.0,
        verify=True,
    )


@pytest.mark.parametrize("wrong", ["null", "token", "content", "pointer"])
def test_the_checks_find_nulls_tokens_content_and_stray_pointers(api: Api, wrong: str) -> None:
    scenario = api.fresh()
    operation = api.schema.find_operation_by_label("POST /v1/spaces")
    assert operation is not None
    case = operation.Case(body={"name": "Robin's space", "colour": "red"})
    headers = {"Authorization": f"Bearer {scenario.token('robin')}"}
    real = case.call(headers=headers)
    case.validate_response(real, checks=checks_for(scenario), headers=headers)
    problem = real.json()
    assert problem["errors"] == [{"pointer": "/colour", "code": "unknown_member"}]
    answers = {
        "null": {**problem, "reason": None},
        "token": {**problem, "reason": scenario.token("alex")},
        "content": {**problem, "reason": f"x{MARKER}"},
        "pointer": {**problem, "errors": [{"pointer": "/color", "code": "unknown_member"}]},
    }
    with pytest.raises(schemathesis.errors.FailureGroup):
        case.validate_response(
            _answer(real, 400, answers[wrong]), checks=checks_for(scenario), headers=headers
        )


def test_the_operations_are_every_operation_of_the_document(api: Api) -> None:
    paths = api.schema.raw_schema["paths"]
    labels = {f"{method.upper()} {path}" for path, item in paths.items() for method in item}
    assert labels == set(OPERATIONS) | {f"GET {path}" for path in STREAM_PATHS}
