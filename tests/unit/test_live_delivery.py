"""Live delivery on the memory adapter: long-polls and streams over the page use cases.

The services wait through `InstantWaker`: a wait that nothing woke returns at once and
moves the fake clock by its length, so a long-poll's deadline and a stream's heartbeat
are reached without any real waiting, and a stream can be drained (read until it
answers a heartbeat). Wake-ups by a commit are proven with the real in-process waker
and a bounded wait for the reader's task.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.fakes import TEST_KEY, FakeClock, InstantWaker, SequentialIds
from turnkeeper.adapters.memory import MemoryUnitOfWorkFactory
from turnkeeper.adapters.tokens import JwtSigner
from turnkeeper.application.bootstrap import Services, build_services
from turnkeeper.application.demo import DemoWorld, build_demo_world
from turnkeeper.application.errors import Unauthenticated
from turnkeeper.application.services.conversation import EventPage
from turnkeeper.application.services.identity import BearerToken
from turnkeeper.application.services.live_stream import HEARTBEAT, LiveStream
from turnkeeper.application.services.runs import AgentEventPage
from turnkeeper.application.settings import Settings
from turnkeeper.application.transactions import AccessDenied
from turnkeeper.domain.errors import RateLimited, ValidationFailed
from turnkeeper.domain.events import EventType
from turnkeeper.domain.messaging import MessageDraft
from turnkeeper.domain.runs import RunState

#: Bound of a wait for something that must happen at once.
BOUND_SECONDS = 5.0
#: Streams per principal in these tests.
MAX_STREAMS = 2
#: Heartbeat of these tests (only the fake clock sees it).
HEARTBEAT_SECONDS = 15
#: The longest long-poll of these tests.
MAX_WAIT_SECONDS = 30
#: No rate limit gets in the way of a property's posts.
BURST = 100000


#: Turns of the event loop that let a started call run up to where it waits.
LOOP_TURNS = 20


def _settings() -> Settings:
    return Settings(
        stream_max_per_principal=MAX_STREAMS,
        stream_heartbeat=timedelta(seconds=HEARTBEAT_SECONDS),
        stream_max_wait=timedelta(seconds=MAX_WAIT_SECONDS),
        rl_message_burst=BURST,
    )


@attrs.define
class Live:
    """Services over a memory store whose readers wait through an `InstantWaker`."""

    services: Services
    world: DemoWorld
    clock: FakeClock
    waker: InstantWaker
    factory: MemoryUnitOfWorkFactory
    posts: int = 0

    def thread(self, channel: str) -> uuid.UUID:
        thread_id = self.world.channels[channel].main_thread_id
        assert thread_id is not None
        return thread_id

    async def post(
        self, author: str, channel: str, *, restricted: bool = False, mention: str | None = None
    ) -> None:
        self.posts += 1
        person = self.world.principal(author)
        mentions = (self.world.principal(mention).id,) if mention else ()
        await self.services.conversation.create_message(
            person,
            self.thread(channel),
            MessageDraft(
                client_msg_id=f"live-{self.posts}",
                content=f"Note {self.posts} from {author}.",
                mentions=mentions,
                restricted_to=(person.id,) if restricted else None,
            ),
        )


async def _live(instant: bool = True) -> Live:
    clock = FakeClock()
    factory = MemoryUnitOfWorkFactory()
    waker = InstantWaker(factory.waker, clock)
    services = build_services(
        factory,
        _settings(),
        clock,
        SequentialIds(),
        JwtSigner(TEST_KEY),
        waker=waker if instant else None,
    )
    world = await build_demo_world(services)
    return Live(services=services, world=world, clock=clock, waker=waker, factory=factory)


@pytest.fixture
async def live() -> Live:
    return await _live()


async def drain(stream: LiveStream[EventPage]) -> list[int]:
    """Every seq the stream delivers until it answers a heartbeat."""
    seqs: list[int] = []
    async for item in stream:
        if item is HEARTBEAT:
            return seqs
        assert isinstance(item, EventPage)
        seqs.extend(event.seq for event in item.events)
    return seqs


async def listening(live: Live, count: int) -> None:
    """Let the started readers run up to their wait, and check that they listen."""
    # Yielding to the loop (no time passes): each reader task opens its listener and
    # reads before it waits.
    for _ in range(count * 10):
        await asyncio.sleep(0)
    assert live.factory.waker.listeners == count


async def visible_seqs(live: Live, reader: str) -> list[int]:
    """Every seq the reader's pages show, from the start."""
    seqs: list[int] = []
    after = 0
    while True:
        page = await live.services.conversation.list_events(
            live.world.principal(reader), after=after
        )
        if not page.events:
            return seqs
        seqs.extend(event.seq for event in page.events)
        after = page.next_after


# -- long-poll ---------------------------------------------------------------------------


async def test_a_long_poll_answers_at_once_when_an_event_is_readable(live: Live) -> None:
    await live.post("alex", "allgemein")
    page = await live.services.live.wait_events(
        live.world.principal("alex"), after=0, wait=MAX_WAIT_SECONDS
    )
    assert page.events
    assert live.waker.waits == 0


async def test_a_long_poll_without_events_ends_empty_at_its_wait(live: Live) -> None:
    alex = live.world.principal("alex")
    end = (await live.services.live.wait_events(alex, after=0)).next_after
    page = await live.services.live.wait_events(alex, after=end + 1000, wait=MAX_WAIT_SECONDS)
    assert (page.events, page.next_after) == ([], end + 1000)
    # The wait ran its course on the clock in heartbeat steps, then stopped.
    assert live.clock.now() - live.world.owner.principal.created_at >= timedelta(
        seconds=MAX_WAIT_SECONDS
    )
    assert live.waker.waits == MAX_WAIT_SECONDS // HEARTBEAT_SECONDS


@pytest.mark.parametrize("wait", [-1, MAX_WAIT_SECONDS + 0.5, float("nan"), float("inf")])
async def test_a_wait_out_of_bounds_is_refused_with_its_pointer(live: Live, wait: float) -> None:
    with pytest.raises(ValidationFailed) as refused:
        await live.services.live.wait_events(live.world.principal("alex"), wait=wait)
    assert [(e.pointer, e.code) for e in refused.value.errors] == [("/wait", "out_of_range")]


async def test_a_long_poll_is_woken_by_a_commit_of_another_task() -> None:
    live = await _live(instant=False)
    sam = live.world.principal("sam")
    end = (await live.services.live.wait_events(sam, after=0, limit=500)).next_after
    waiting = asyncio.create_task(
        live.services.live.wait_events(sam, after=end, wait=MAX_WAIT_SECONDS)
    )
    await listening(live, 1)
    await live.post("alex", "allgemein")
    page = await asyncio.wait_for(waiting, BOUND_SECONDS)
    assert page.events[0].type is EventType.MESSAGE_CREATED


async def test_an_agent_long_poll_is_woken_by_its_invocation_only() -> None:
    live = await _live(instant=False)
    lotse = live.world.principal("lotse")
    end = (await live.services.live.wait_agent_events(lotse)).next_after
    waiting = asyncio.create_task(
        live.services.live.wait_agent_events(lotse, after=end, wait=MAX_WAIT_SECONDS)
    )
    await listening(live, 1)
    await live.post("alex", "eskalation", mention="lotse")
    page = await asyncio.wait_for(waiting, BOUND_SECONDS)
    assert [d.event.type for d in page.deliveries] == [EventType.AGENT_INVOCATION]
    assert page.deliveries[0].invocation_token


async def test_an_agent_long_poll_by_token_is_woken_by_its_invocation() -> None:
    # The token is read by the first page (ADR 0026); an empty one waits as the agent.
    live = await _live(instant=False)
    lotse = live.world.principal("lotse")
    bearer = BearerToken.of(live.world.agents["lotse"].token)
    end = (await live.services.live.wait_agent_events(lotse)).next_after
    waiting = asyncio.create_task(
        live.services.live.wait_agent_events(bearer, after=end, wait=MAX_WAIT_SECONDS)
    )
    await listening(live, 1)
    await live.post("alex", "eskalation", mention="lotse")
    page = await asyncio.wait_for(waiting, BOUND_SECONDS)
    assert [d.event.type for d in page.deliveries] == [EventType.AGENT_INVOCATION]
    assert page.deliveries[0].invocation_token


async def test_an_agent_long_poll_by_token_with_a_page_waits_for_nothing(live: Live) -> None:
    await live.post("alex", "eskalation", mention="lotse")
    bearer = BearerToken.of(live.world.agents["lotse"].token)
    page = await live.services.live.wait_agent_events(bearer, after=0, wait=MAX_WAIT_SECONDS)
    assert [d.event.type for d in page.deliveries] == [EventType.AGENT_INVOCATION]
    assert live.waker.waits == 0
    assert live.factory.waker.listeners == 0


@pytest.mark.parametrize("wait", [-1, MAX_WAIT_SECONDS + 0.5])
async def test_a_long_poll_by_token_answers_401_then_403_then_its_wait(
    live: Live, wait: float
) -> None:
    await live.post("alex", "eskalation", mention="lotse")
    with pytest.raises(Unauthenticated):
        await live.services.live.wait_agent_events(BearerToken.of("tk_unknown"), wait=wait)
    alex = BearerToken.of(live.world.people["alex"].token)
    with pytest.raises(AccessDenied) as denied:
        await live.services.live.wait_agent_events(alex, wait=wait)
    assert (denied.value.code, denied.value.reason) == ("forbidden", "agents_only")
    lotse = BearerToken.of(live.world.agents["lotse"].token)
    with pytest.raises(ValidationFailed) as refused:
        await live.services.live.wait_agent_events(lotse, wait=wait)
    assert [(e.pointer, e.code) for e in refused.value.errors] == [("/wait", "out_of_range")]
    # Refused before anything was delivered: the invocation comes as a first delivery.
    page = await live.services.live.wait_agent_events(lotse)
    assert [(d.event.type, d.redelivered) for d in page.deliveries] == [
        (EventType.AGENT_INVOCATION, False)
    ]


@pytest.mark.parametrize("by_token", [False, True])
async def test_a_persons_long_poll_is_agents_only_whatever_its_wait(
    live: Live, by_token: bool
) -> None:
    alex = live.world.principal("alex")
    actor = BearerToken.of(live.world.people["alex"].token) if by_token else alex
    with pytest.raises(AccessDenied) as denied:
        await live.services.live.wait_agent_events(actor, wait=-1)
    assert (denied.value.code, denied.value.reason) == ("forbidden", "agents_only")


# -- streams -----------------------------------------------------------------------------


async def test_a_stream_delivers_the_backlog_then_heartbeats_then_new_events(
    live: Live,
) -> None:
    await live.post("alex", "allgemein")
    await live.post("robin", "kampagnen")
    alex_stream = await live.services.live.open_events(live.world.principal("alex"), after=0)
    backlog = await drain(alex_stream)
    assert backlog
    assert backlog == await visible_seqs(live, "alex")
    # Nothing new: one heartbeat per heartbeat interval.
    before = live.clock.now()
    assert await anext(alex_stream) is HEARTBEAT
    assert live.clock.now() - before == timedelta(seconds=HEARTBEAT_SECONDS)
    await live.post("alex", "eskalation")
    fresh = await drain(alex_stream)
    await alex_stream.aclose()
    assert fresh
    assert backlog + fresh == await visible_seqs(live, "alex")


async def test_a_stream_call_cut_while_it_reads_leaves_the_event_to_the_next_call(
    live: Live,
) -> None:
    # An embedding program reads a stream with a timeout per item and goes on after one:
    # the cut read had used up the wake-up, and the next call answered heartbeats while
    # the committed event stayed unread until some other commit.
    alex = live.world.principal("alex")
    stream = await live.services.live.open_events(alex, after=0)
    backlog = await drain(stream)
    await live.post("alex", "allgemein")
    async with live.factory():  # holds the store: the stream's read waits for it
        call = asyncio.ensure_future(anext(stream))
        for _ in range(LOOP_TURNS):
            await asyncio.sleep(0)
        assert not call.done()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
    item = await anext(stream)
    await stream.aclose()
    assert isinstance(item, EventPage)
    assert backlog + [e.seq for e in item.events] == await visible_seqs(live, "alex")


async def test_a_stream_never_carries_an_event_of_a_thread_the_reader_may_not_open(
    live: Live,
) -> None:
    sam = live.world.principal("sam")
    async with await live.services.live.open_events(sam, after=0) as stream:
        await drain(stream)
        await live.post("alex", "eskalation")  # Sam may not read Eskalation
        await live.post("alex", "allgemein", restricted=True)  # nor what is not for Sam
        assert await drain(stream) == []
        await live.post("alex", "allgemein")
        delivered = await drain(stream)
    assert delivered
    assert set(delivered) <= set(await visible_seqs(live, "sam"))


async def test_the_stream_limit_refuses_one_more_stream_and_frees_a_closed_one(
    live: Live,
) -> None:
    alex = live.world.principal("alex")
    first = await live.services.live.open_events(alex)
    second = await live.services.live.open_agent_events(live.world.principal("lotse"))
    third = await live.services.live.open_events(alex)
    assert live.services.live.open_streams == 3
    with pytest.raises(RateLimited) as refused:
        await live.services.live.open_events(alex)
    assert refused.value.retry_after == HEARTBEAT_SECONDS
    await first.aclose()
    await first.aclose()  # closing twice frees one place only
    fourth = await live.services.live.open_events(alex)
    for stream in (second, third, fourth):
        await stream.aclose()
    assert live.services.live.open_streams == 0


async def test_a_refused_open_keeps_no_place(live: Live) -> None:
    alex = live.world.principal("alex")
    for _ in range(MAX_STREAMS + 1):
        with pytest.raises(ValidationFailed):
            await live.services.live.open_events(alex, after=-1)
        with pytest.raises(AccessDenied):
            await live.services.live.open_agent_events(alex)
    assert live.services.live.open_streams == 0


async def test_the_stream_count_hooks_see_every_change(live: Live) -> None:
    counts: list[int] = []
    live.services.live.stream_count_hooks.append(counts.append)
    stream = await live.services.live.open_events(live.world.principal("alex"))
    await stream.aclose()
    assert counts == [1, 0]


async def test_close_ends_every_stream_and_long_poll() -> None:
    live = await _live(instant=False)
    alex = live.world.principal("alex")
    stream = await live.services.live.open_events(alex, after=10**9)
    end = (await live.services.live.wait_events(alex, after=0, limit=500)).next_after
    polling = asyncio.create_task(
        live.services.live.wait_events(alex, after=end, wait=MAX_WAIT_SECONDS)
    )
    reading = asyncio.create_task(anext(stream))
    await listening(live, 2)
    live.services.live.close()
    page = await asyncio.wait_for(polling, BOUND_SECONDS)
    assert page.events == []
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(reading, BOUND_SECONDS)
    await stream.aclose()


async def test_each_agent_stream_delivery_carries_a_fresh_invocation_token(live: Live) -> None:
    lotse = live.world.principal("lotse")
    await live.post("alex", "eskalation", mention="lotse")
    tokens = []
    for _ in range(2):
        async with await live.services.live.open_agent_events(lotse, after=0) as stream:
            page = await anext(stream)
            assert isinstance(page, AgentEventPage)
            invocation = [d for d in page.deliveries if d.event.type is EventType.AGENT_INVOCATION]
            assert len(invocation) == 1
            tokens.append(invocation[0].invocation_token)
    assert all(tokens)
    assert tokens[0] != tokens[1]


# -- the property ------------------------------------------------------------------------

#: One step: a post (author, channel, restricted), a reconnect of the reader (None), or
#: the reader reading what its stream has (True).
Step = tuple[str, str, bool] | bool | None

_POSTS = st.tuples(
    st.sampled_from(["alex", "robin"]),
    st.sampled_from(["allgemein", "eskalation", "kampagnen"]),
    st.booleans(),
)
_STEPS = st.lists(st.one_of(_POSTS, st.none(), st.just(True)), min_size=1, max_size=16)


async def _run_steps(steps: list[Step], reader: str) -> tuple[list[int], list[int]]:
    live = await _live()
    principal = live.world.principal(reader)
    received: list[int] = []
    stream = await live.services.live.open_events(principal)
    try:
        for step in steps:
            if step is None:
                # A reconnect resumes after the last id seen, as EventSource does; what
                # the old stream had read but not yet delivered comes again.
                await stream.aclose()
                stream = await live.services.live.open_events(
                    principal, after=received[-1] if received else 0
                )
            elif isinstance(step, bool):
                received.extend(await drain(stream))
            else:
                author, channel, restricted = step
                # Alex may not write into Marketing; Robin owns everything.
                author = "robin" if channel == "kampagnen" else author
                await live.post(author, channel, restricted=restricted)
        received.extend(await drain(stream))
    finally:
        await stream.aclose()
    return received, await visible_seqs(live, reader)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=_STEPS, reader=st.sampled_from(["sam", "alex"]))
def test_any_commits_and_reconnects_deliver_each_visible_event_once_in_seq_order(
    steps: list[Step], reader: str
) -> None:
    received, visible = asyncio.run(_run_steps(steps, reader))
    assert received == visible


# -- a backlog of undeliverable events ------------------------------------------------------


async def _ended_invocations(live: Live, count: int) -> None:
    """`count` invocations of Lotse whose runs ended: skipped by every later read."""
    lotse = live.world.principal("lotse")
    for _ in range(count):
        await live.post("alex", "eskalation", mention="lotse")
        page = await live.services.runs.poll(lotse, after=0, limit=500)
        (queued,) = page.deliveries
        assert queued.invocation_token is not None
        run_id = queued.event.resource_id
        await live.services.runs.start(lotse, run_id, queued.invocation_token)
        await live.services.runs.finish(lotse, run_id, RunState.COMPLETED, None)


@pytest.fixture
async def small_pages() -> Live:
    """A world whose pages hold `SMALL_PAGE` events, with a backlog longer than a page."""
    clock = FakeClock()
    factory = MemoryUnitOfWorkFactory()
    waker = InstantWaker(factory.waker, clock)
    settings_ = attrs.evolve(_settings(), page_default_limit=SMALL_PAGE)
    services = build_services(
        factory, settings_, clock, SequentialIds(), JwtSigner(TEST_KEY), waker=waker
    )
    live = Live(
        services=services,
        world=await build_demo_world(services),
        clock=clock,
        waker=waker,
        factory=factory,
    )
    await _ended_invocations(live, SMALL_PAGE * 2)
    await live.post("alex", "eskalation", mention="lotse")
    return live


#: Events per page in the backlog tests.
SMALL_PAGE = 2


async def test_a_long_poll_reads_past_undeliverable_events_without_waiting(
    small_pages: Live,
) -> None:
    lotse = small_pages.world.principal("lotse")
    page = await small_pages.services.live.wait_agent_events(lotse, after=0, wait=MAX_WAIT_SECONDS)
    assert [d.event.type for d in page.deliveries] == [EventType.AGENT_INVOCATION]
    assert small_pages.waker.waits == 0


async def test_an_agent_stream_reads_past_undeliverable_events_without_waiting(
    small_pages: Live,
) -> None:
    lotse = small_pages.world.principal("lotse")
    async with await small_pages.services.live.open_agent_events(lotse) as stream:
        page = await anext(stream)
    assert isinstance(page, AgentEventPage)
    assert [d.event.type for d in page.deliveries] == [EventType.AGENT_INVOCATION]
    assert small_pages.waker.waits == 0
