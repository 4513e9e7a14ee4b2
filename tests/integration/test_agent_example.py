"""The example agent of docs/agents.md runs as printed against a served turnkeeper.

The application runs in a uvicorn server on a loopback port (`tests.live_server`, as
``turnkeeper serve`` runs it), over the memory store with the demo world. The example
agent follows its stream; a person's post mentioning it must end, within a bound, with
the agent's answer in the thread and the run completed, and a follow-up written while
it waits for input must resume the run. A follow-up of a run the agent can no longer read
(404) is skipped, and the work after it comes through. A server that cannot answer now
(a 429 on the answer, a start whose answer is lost) does not cost the run.
"""

from __future__ import annotations

import asyncio
import importlib.util
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
import pytest

from tests.live_server import served_app
from tests.support.fakes import TEST_KEY, FakeClock, SequentialIds
from turnkeeper.adapters.client import AgentRuntimeClient, ClientProblem, ClientUnavailable
from turnkeeper.adapters.memory import MemoryUnitOfWorkFactory
from turnkeeper.adapters.tokens import JwtSigner
from turnkeeper.application.bootstrap import Services, build_services
from turnkeeper.application.demo import DemoWorld, build_demo_world
from turnkeeper.application.settings import Settings
from turnkeeper.domain.messaging import MessageDraft, Origin
from turnkeeper.domain.runs import RunState
from turnkeeper.domain.world import ResourceKind

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "agent.py"
#: Bound of the whole exchange.
BOUND_SECONDS = 20.0


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("agent_example", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@attrs.define
class World:
    """The served application, its services and the demo world."""

    url: str
    services: Services
    world: DemoWorld

    def eskalation(self) -> uuid.UUID:
        thread_id = self.world.channels["eskalation"].main_thread_id
        assert thread_id is not None
        return thread_id


@pytest.fixture
async def served() -> AsyncIterator[World]:
    services = build_services(
        MemoryUnitOfWorkFactory(), Settings(), FakeClock(), SequentialIds(), JwtSigner(TEST_KEY)
    )
    world = await build_demo_world(services)
    async with served_app(services) as app:
        yield World(url=app.url, services=services, world=world)


def test_the_page_includes_the_file() -> None:
    page = (EXAMPLE.parents[1] / "agents.md").read_text(encoding="utf-8")
    assert '--8<-- "docs/examples/agent.py"' in page


async def test_the_example_agent_answers_a_mention_live(served: World) -> None:
    agent = asyncio.create_task(
        _example().serve(served.url, served.world.agents["lotse"].token, handled=1)
    )
    alex = served.world.principal("alex")
    lotse = served.world.principal("lotse")
    posted = await served.services.conversation.create_message(
        alex,
        served.eskalation(),
        MessageDraft(
            client_msg_id="example-1", content="Can you check the invoice?", mentions=(lotse.id,)
        ),
    )
    assert await asyncio.wait_for(agent, BOUND_SECONDS) == 1
    history = await served.services.conversation.list_messages(alex, served.eskalation())
    answers = [m for m in history.messages if m.author_id == lotse.id and m.origin is Origin.AGENT]
    assert [m.content for m in answers] == ["You wrote 5 words. Noted, I am on it."]
    events = await served.services.conversation.list_events(served.world.principal("robin"))
    (ended,) = [e for e in events.events if e.payload.get("state") == "completed"]
    run = await served.services.runs.get(alex, ended.resource_id)
    assert run.run.state is RunState.COMPLETED
    assert run.run.triggering_message_id == posted.message.id


async def test_the_example_agent_resumes_a_run_on_the_followup_that_answers(
    served: World,
) -> None:
    alex = served.world.principal("alex")
    lotse = served.world.principal("lotse")
    example = _example()
    await served.services.runs.heartbeat(lotse, "queue")
    await served.services.conversation.create_message(
        alex,
        served.eskalation(),
        MessageDraft(client_msg_id="ask-1", content="Please file it.", mentions=(lotse.id,)),
    )
    (invocation,) = (await served.services.runs.poll(lotse, after=0)).deliveries
    run_id = invocation.event.resource_id
    assert invocation.invocation_token is not None
    await served.services.runs.start(lotse, run_id, invocation.invocation_token)
    await served.services.runs.await_input(lotse, run_id)
    await served.services.runs.ack(lotse, invocation.event.seq)
    # The agent, started now, gets the follow-up that answers its question.
    agent = asyncio.create_task(
        example.serve(served.url, served.world.agents["lotse"].token, handled=1)
    )
    await served.services.conversation.create_message(
        alex,
        served.eskalation(),
        MessageDraft(client_msg_id="ask-2", content="Account 7.", mentions=(lotse.id,)),
    )
    assert await asyncio.wait_for(agent, BOUND_SECONDS) == 1
    view = await served.services.runs.get(alex, run_id)
    assert view.run.state is RunState.RUNNING
    assert list(view.followups.values()) == ["absorbed"]


async def test_the_example_agent_skips_a_followup_of_a_run_it_can_no_longer_read(
    served: World,
) -> None:
    # Texter writes in Support/Allgemein through a grant only. Its run there waits for
    # input; Alex answers (an agent.followup), then Robin takes the grant away: the run
    # answers 404 to Texter on every delivery of that event.
    alex, sam, robin = (served.world.principal(h) for h in ("alex", "sam", "robin"))
    texter = served.world.principal("texter")
    allgemein = served.world.channels["allgemein"]
    assert allgemein.main_thread_id is not None
    await served.services.conversation.create_message(
        alex,
        allgemein.main_thread_id,
        MessageDraft(client_msg_id="ask-1", content="Texter, a slogan?", mentions=(texter.id,)),
    )
    (invocation,) = (await served.services.runs.poll(texter, after=0)).deliveries
    run_id = invocation.event.resource_id
    assert invocation.invocation_token is not None
    await served.services.runs.start(texter, run_id, invocation.invocation_token)
    await served.services.runs.await_input(texter, run_id)
    await served.services.runs.ack(texter, invocation.event.seq)
    await served.services.conversation.create_message(
        alex,
        allgemein.main_thread_id,
        MessageDraft(client_msg_id="ask-2", content="For the spring sale.", mentions=(texter.id,)),
    )
    (grant,) = await served.services.grants.list_grants(
        robin, principal_id=texter.id, resource_id=allgemein.id
    )
    assert grant.resource_kind is ResourceKind.CHANNEL
    await served.services.grants.delete_grant(robin, grant.id)
    # The next work: Sam asks Texter in Marketing/Kampagnen, where it is the operator.
    kampagnen = served.world.channels["kampagnen"]
    assert kampagnen.main_thread_id is not None
    await served.services.conversation.create_message(
        sam,
        kampagnen.main_thread_id,
        MessageDraft(client_msg_id="ask-3", content="Texter, a headline?", mentions=(texter.id,)),
    )

    agent = asyncio.create_task(
        _example().serve(served.url, served.world.agents["texter"].token, handled=2)
    )

    assert await asyncio.wait_for(agent, BOUND_SECONDS) == 2
    history = await served.services.conversation.list_messages(sam, kampagnen.main_thread_id)
    answers = [m for m in history.messages if m.author_id == texter.id and m.origin is Origin.AGENT]
    assert [m.content for m in answers] == ["You wrote 3 words. Noted, I am on it."]


class _FlakyClient(AgentRuntimeClient):
    """A client whose server fails for now: sends refused first, a start's answer lost."""

    def __init__(self, url: str, token: str) -> None:
        super().__init__(url, token)
        self.send_failures: list[Exception] = []
        self.lose_start_answer = False

    async def send(self, *args: Any, **kwargs: Any) -> Any:
        if self.send_failures:
            raise self.send_failures.pop(0)
        return await super().send(*args, **kwargs)

    async def start(self, run_id: str | uuid.UUID, invocation_token: str) -> Any:
        run = await super().start(run_id, invocation_token)
        if self.lose_start_answer:
            self.lose_start_answer = False
            raise ClientUnavailable("the start's answer was lost")
        return run


@pytest.mark.parametrize("failure", ["rate_limited", "start_answer_lost"])
async def test_the_example_agent_rides_out_a_server_that_cannot_answer_now(
    served: World, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    example = _example()
    monkeypatch.setattr(example, "RETRY_PAUSE_SECONDS", 0.0)
    alex = served.world.principal("alex")
    lotse = served.world.principal("lotse")
    await served.services.conversation.create_message(
        alex,
        served.eskalation(),
        MessageDraft(client_msg_id="flaky-1", content="Please check.", mentions=(lotse.id,)),
    )
    async with _FlakyClient(served.url, served.world.agents["lotse"].token) as client:
        if failure == "rate_limited":
            client.send_failures.append(ClientProblem(429, "rate_limited", retry_after=0))
        else:
            client.lose_start_answer = True
        (event,) = (await client.wait_events(wait=0)).events
        await asyncio.wait_for(example.answer(client, event), BOUND_SECONDS)
    run = await served.services.runs.get(alex, uuid.UUID(str(event.run_id)))
    assert run.run.state is RunState.COMPLETED
    history = await served.services.conversation.list_messages(alex, served.eskalation())
    answers = [m for m in history.messages if m.author_id == lotse.id and m.origin is Origin.AGENT]
    assert [m.content for m in answers] == ["You wrote 2 words. Noted, I am on it."]
