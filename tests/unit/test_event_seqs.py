"""The event log's numbering and the memory store's model of the horizon (ADR 0020)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnkeeper.adapters.event_seqs import (
    MAX_EVENTS_PER_UNIT,
    SEQ_SHIFT,
    TooManyEvents,
    check_count,
    first_seq,
    horizon_bound,
)
from turnkeeper.adapters.memory.store import MemoryStore

xids = st.integers(min_value=1, max_value=2**40)
numbers = st.integers(min_value=1, max_value=MAX_EVENTS_PER_UNIT)


@pytest.mark.parametrize(
    ("xid", "number", "seq"),
    [(1, 1, 65_537), (1, MAX_EVENTS_PER_UNIT, 131_071), (731, 2, 731 * 65_536 + 2)],
)
def test_a_seq_is_the_xid_shifted_plus_the_number(xid: int, number: int, seq: int) -> None:
    assert first_seq(xid) + number == seq


@given(older=xids, gap=st.integers(min_value=1, max_value=1000), a=numbers, b=numbers)
def test_seq_order_is_xid_order_then_number_order(older: int, gap: int, a: int, b: int) -> None:
    assert first_seq(older) + a < first_seq(older + gap) + b


@given(xid=xids, number=numbers, horizon=xids)
def test_an_event_is_below_the_horizon_exactly_when_its_writer_is(
    xid: int, number: int, horizon: int
) -> None:
    assert (first_seq(xid) + number < horizon_bound(horizon)) == (xid < horizon)


def test_a_unit_may_append_as_many_events_as_its_numbers() -> None:
    check_count(MAX_EVENTS_PER_UNIT)
    with pytest.raises(TooManyEvents):
        check_count(MAX_EVENTS_PER_UNIT + 1)
    assert MAX_EVENTS_PER_UNIT == 2**SEQ_SHIFT - 1


def test_the_memory_horizon_is_the_oldest_running_transaction() -> None:
    store = MemoryStore()
    assert store.horizon() == horizon_bound(1)
    first, second = store.take_xid(), store.take_xid()
    assert store.horizon() == horizon_bound(first)
    store.end(first)
    assert store.horizon() == horizon_bound(second)
    store.end(second)
    # Ids are never reused, also after a rollback: the horizon only moves forward.
    assert store.horizon() == horizon_bound(second + 1)
    assert store.take_xid() == second + 1
