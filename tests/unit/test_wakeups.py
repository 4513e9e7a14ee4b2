"""The in-process wake-up hub and the polling fallback of the wake-up port.

Wake-ups are proven with events: a waiting task is released by a signal and the test
waits for it with a bound; nothing sleeps to let something happen.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from datetime import timedelta

from turnkeeper.adapters.postgres.wakeup import Notification, parse_payload
from turnkeeper.adapters.wakeups import LocalWaker
from turnkeeper.application.wakeup import SHARED_FEED, PollingWaker

#: The bound of every wait for something that must happen at once.
BOUND_SECONDS = 5.0
#: A wait that must run to its end: as short as a timer can be.
NO_WAIT = timedelta(0)
#: A wait that a wake-up must cut short.
LONG_WAIT = timedelta(seconds=60)

ALEX = uuid.UUID("00000000-0000-7001-8000-000000000001")
LOTSE = uuid.UUID("00000000-0000-7001-8000-000000000004")


async def test_a_signal_of_the_feed_releases_a_waiting_listener() -> None:
    waker = LocalWaker()
    with waker.listen(SHARED_FEED) as listener:
        waiting = asyncio.create_task(listener.wait(LONG_WAIT))
        await asyncio.sleep(0)  # let the task start waiting
        waker.signal([SHARED_FEED])
        assert await asyncio.wait_for(waiting, BOUND_SECONDS) is True


async def test_a_signal_before_the_wait_is_not_lost() -> None:
    waker = LocalWaker()
    with waker.listen(LOTSE) as listener:
        waker.signal([LOTSE])
        assert await listener.wait(NO_WAIT) is True
        # The wake-up was consumed by that wait.
        assert await listener.wait(NO_WAIT) is False


async def test_a_signal_of_another_feed_does_not_wake() -> None:
    waker = LocalWaker()
    with waker.listen(LOTSE) as lotse, waker.listen(SHARED_FEED) as shared:
        waker.signal([ALEX])
        assert await lotse.wait(NO_WAIT) is False
        assert await shared.wait(NO_WAIT) is False
        waker.signal([SHARED_FEED, ALEX])
        assert await shared.wait(NO_WAIT) is True
        assert await lotse.wait(NO_WAIT) is False


async def test_every_signal_moves_the_generation_and_signal_all_wakes_everyone() -> None:
    waker = LocalWaker()
    before = waker.generation
    with waker.listen(LOTSE) as lotse, waker.listen(SHARED_FEED) as shared:
        waker.signal([ALEX])
        assert waker.generation != before
        middle = waker.generation
        waker.signal_all()
        assert waker.generation != middle
        assert await lotse.wait(NO_WAIT) is True
        assert await shared.wait(NO_WAIT) is True


async def test_close_releases_every_wait_for_good() -> None:
    waker = LocalWaker()
    with waker.listen(SHARED_FEED) as listener:
        waiting = asyncio.create_task(listener.wait(LONG_WAIT))
        await asyncio.sleep(0)
        waker.close()
        assert await asyncio.wait_for(waiting, BOUND_SECONDS) is True
        assert waker.closed
        assert await listener.wait(LONG_WAIT) is True


async def test_a_signal_from_another_thread_wakes_the_loop_of_the_listener() -> None:
    waker = LocalWaker()
    with waker.listen(SHARED_FEED) as listener:
        waiting = asyncio.create_task(listener.wait(LONG_WAIT))
        await asyncio.sleep(0)
        thread = threading.Thread(target=waker.signal, args=([SHARED_FEED],))
        thread.start()
        assert await asyncio.wait_for(waiting, BOUND_SECONDS) is True
        thread.join(BOUND_SECONDS)


async def test_the_listener_count_is_reported_on_open_and_close() -> None:
    counts: list[int] = []
    waker = LocalWaker(on_count=counts.append)
    with waker.listen(SHARED_FEED), waker.listen(LOTSE):
        assert waker.listeners == 2
    assert waker.listeners == 0
    assert counts == [1, 2, 1, 0]


async def test_the_polling_waker_always_reports_a_new_generation_and_wakes_on_close() -> None:
    waker = PollingWaker()
    assert waker.generation != waker.generation
    with waker.listen(SHARED_FEED) as listener:
        assert await listener.wait(NO_WAIT) is False
        waiting = asyncio.create_task(listener.wait(LONG_WAIT))
        await asyncio.sleep(0)
        waker.close()
        assert await asyncio.wait_for(waiting, BOUND_SECONDS) is True


def test_notification_payloads_name_the_feeds_and_never_fail() -> None:
    assert parse_payload(f"42 * {LOTSE}") == Notification(
        top_seq=42, feeds=frozenset({SHARED_FEED, LOTSE})
    )
    assert parse_payload("7 all") == Notification(top_seq=7, feeds=None)
    # Anything unreadable wakes everyone rather than no one.
    for bad in ("", "x *", "9 not-a-uuid"):
        assert parse_payload(bad).feeds is None
