"""`settle_heap` freezes what start-up built and sets the young generation's threshold."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from turnkeeper.adapters.http.server import settle_heap

THRESHOLD = 12_345


class Node:
    """A reference cycle's member (weakly referenceable)."""

    def __init__(self) -> None:
        self.other: Node | None = None


def _cycle() -> weakref.ref[Node]:
    first, second = Node(), Node()
    first.other, second.other = second, first
    return weakref.ref(first)


@pytest.fixture(autouse=True)
def _restored_collector() -> Iterator[None]:
    saved = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*saved)


def test_start_up_objects_are_frozen_and_the_threshold_set() -> None:
    gc.unfreeze()
    older = gc.get_threshold()[1:]
    before = _cycle()
    frozen = settle_heap(THRESHOLD)
    assert frozen == gc.get_freeze_count() > 0
    assert gc.get_threshold() == (THRESHOLD, *older)
    # Garbage of start-up was collected before the freeze; so nothing of it is kept.
    assert before() is None


def test_cycles_made_after_it_are_still_collected() -> None:
    settle_heap(THRESHOLD)
    after = _cycle()
    gc.collect()
    assert after() is None


def test_the_frozen_objects_are_left_out_of_collections() -> None:
    kept = Node()
    kept.other = kept
    probe = weakref.ref(kept)
    settle_heap(THRESHOLD)
    del kept
    gc.collect()
    # A cycle alive at start-up lives on once frozen: that is what freezing is for.
    assert probe() is not None
