"""A stop signal while the embedded server starts or stops waits until it has.

`turnkeeper.adapters.wiring.stop_signals_held` notes SIGTERM and SIGINT during its
block and raises each again once the handlers from before are back, so that a command
stopped while ``pg_ctl`` runs neither leaves the server running without a user nor its
own pid among the users after it ended (the audit's orphaned PostgreSQL).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from types import FrameType

import pytest

from turnkeeper.adapters.http.workers import STOP_SIGNALS
from turnkeeper.adapters.wiring import stop_signals_held


@pytest.fixture
def handled() -> Iterator[list[int]]:
    """The stop signals handled by the test's own handler, in order."""
    seen: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        seen.append(signum)

    previous = {signum: signal.signal(signum, handler) for signum in STOP_SIGNALS}
    try:
        yield seen
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def test_a_stop_during_the_block_is_delivered_after_it(handled: list[int]) -> None:
    with stop_signals_held():
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGINT)
        assert handled == []
    assert handled == [signal.SIGTERM, signal.SIGINT]


def test_a_repeated_stop_is_delivered_once(handled: list[int]) -> None:
    with stop_signals_held():
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGTERM)
    assert handled == [signal.SIGTERM]


def test_the_handlers_from_before_are_back_after_the_block(handled: list[int]) -> None:
    before = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    with stop_signals_held():
        assert all(signal.getsignal(s) is not before[s] for s in STOP_SIGNALS)
    assert {signum: signal.getsignal(signum) for signum in STOP_SIGNALS} == before
    signal.raise_signal(signal.SIGTERM)
    assert handled == [signal.SIGTERM]


def _failing_start() -> None:
    with stop_signals_held():
        signal.raise_signal(signal.SIGTERM)
        raise RuntimeError("did not start")


def test_a_failing_block_drops_the_stop_and_keeps_its_error(handled: list[int]) -> None:
    with pytest.raises(RuntimeError, match="did not start"):
        _failing_start()
    assert handled == []


def test_a_stop_that_raises_is_raised_after_the_block() -> None:
    # A command's SIGTERM raises KeyboardInterrupt: after the block, not inside it.
    done: list[str] = []

    def start() -> None:
        with stop_signals_held():
            signal.raise_signal(signal.SIGTERM)
            done.append("block")

    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            start()
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert done == ["block"]


def test_outside_the_main_thread_the_block_runs_as_it_is(handled: list[int]) -> None:
    def in_thread() -> None:
        with stop_signals_held():
            pass

    thread = threading.Thread(target=in_thread)
    thread.start()
    thread.join()
    assert handled == []
