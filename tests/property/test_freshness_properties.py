"""Properties of the session freshness frontiers and of chunked logical sends.

Frontiers as a session holds them come from `turnkeeper.domain.strategies`; the
sequences of session operations and the texts to split are drawn here.
"""

from __future__ import annotations

from typing import Literal

from hypothesis import given
from hypothesis import strategies as st

from turnkeeper.domain import strategies as ds
from turnkeeper.domain.freshness import (
    MessageFreshnessFrontier,
    SessionFreshnessState,
    surface_page,
    verdict,
)
from turnkeeper.domain.logical_sends import (
    AcceptedChunk,
    chunk_client_message_id,
    next_chunk_seen,
    resume_seen,
    split_content,
)
from turnkeeper.domain.text import is_blank, words

KEYS = ("thr_alex", "thr_sam", "thr_robin")
seqs = st.integers(min_value=0, max_value=200)
keys = st.sampled_from(KEYS)

OpName = Literal["surfaced", "held", "pending", "sent"]
Op = tuple[OpName, str, int, int | None]

ops = st.lists(
    st.tuples(
        st.sampled_from(["surfaced", "held", "pending", "sent"]),
        keys,
        seqs,
        st.none() | seqs,
    ),
    max_size=60,
)


def apply(state: SessionFreshnessState, op: Op) -> None:
    name, key, seq, hint = op
    if name == "surfaced":
        state.mark_surfaced(key, seq)
    elif name == "held":
        state.mark_held(key, seq, hint)
    elif name == "pending":
        state.mark_pending(key, seq)
    else:
        state.mark_sent(key, seq, f"m-{seq}")


@given(ds.freshness_frontiers(), seqs, seqs)
def test_a_page_never_surfaces_a_seq_it_did_not_show(
    frontier: MessageFreshnessFrontier, after_seq: int, covers: int
) -> None:
    # Everything through the new observed seq was shown: before, or on the page.
    moved = surface_page(frontier, after_seq, covers)
    assert moved.observed_seq in (frontier.observed_seq, max(frontier.observed_seq, covers))
    if moved.observed_seq > frontier.observed_seq:
        assert after_seq <= frontier.observed_seq


@given(ops)
def test_observed_never_decreases(operations: list[Op]) -> None:
    state = SessionFreshnessState()
    for op in operations:
        before = {k: state.frontier(k).observed_seq for k in KEYS}
        apply(state, op)
        for k in KEYS:
            assert state.frontier(k).observed_seq >= before[k]


@given(ops)
def test_observed_is_the_high_water_mark_of_surfaces_and_own_sends(operations: list[Op]) -> None:
    state = SessionFreshnessState()
    for op in operations:
        apply(state, op)
    for k in KEYS:
        surfaced = [
            s for name, key, s, _ in operations if key == k and name in ("surfaced", "sent")
        ]
        assert state.frontier(k).observed_seq == max(surfaced, default=0)


@given(ops, st.sampled_from(["held", "pending"]), keys, seqs, st.none() | seqs)
def test_held_and_pending_never_advance_observed(
    operations: list[Op], name: OpName, key: str, latest: int, hint: int | None
) -> None:
    state = SessionFreshnessState()
    for op in operations:
        apply(state, op)
    before = state.frontier(key)
    apply(state, (name, key, latest, hint))
    after = state.frontier(key)
    assert after.observed_seq == before.observed_seq
    assert after.source_message_id == before.source_message_id
    assert after.latest_known_seq >= max(before.latest_known_seq, latest)


@given(ops)
def test_a_local_hold_happens_exactly_when_latest_known_is_ahead(operations: list[Op]) -> None:
    state = SessionFreshnessState()
    for op in operations:
        apply(state, op)
        for k in KEYS:
            f = state.frontier(k)
            v = state.check_send(k)
            assert v.hold == (f.latest_known_seq > f.observed_seq)
            assert v.seen_up_to_seq == f.observed_seq
            # The frontier invariant: the hint lies in (observed, latest_known] or is 0.
            assert f.observed_seq <= f.latest_known_seq
            assert f.needs_refresh_until_seq == 0 or (
                f.observed_seq < f.needs_refresh_until_seq <= f.latest_known_seq
            )


@given(ds.freshness_frontiers())
def test_a_frontier_that_needs_a_refresh_holds(frontier: MessageFreshnessFrontier) -> None:
    local = verdict(frontier)
    if frontier.needs_refresh_until_seq:
        assert local.hold


@given(ops, keys)
def test_surfacing_through_latest_known_always_clears_the_hold(
    operations: list[Op], key: str
) -> None:
    state = SessionFreshnessState()
    for op in operations:
        apply(state, op)
    state.mark_surfaced(key, state.frontier(key).latest_known_seq)
    assert state.check_send(key).hold is False
    assert state.frontier(key).needs_refresh_until_seq == 0


#: Text with many break points and multi-byte characters, next to arbitrary text.
texts = st.text(alphabet=st.sampled_from("ab \n\tä😀"), max_size=400) | st.text(max_size=400)
sizes = st.integers(min_value=4, max_value=64)


@given(texts, sizes)
def test_chunks_keep_every_visible_character_and_respect_the_size(content: str, size: int) -> None:
    # Whitespace that cannot share a chunk with a visible character is left out
    # (tests/property/test_chunk_properties.py); everything else comes back.
    chunks = split_content(content, size)
    assert "".join(words("".join(chunks))) == "".join(words(content))
    for chunk in chunks:
        assert not is_blank(chunk)
        assert len(chunk.encode("utf-8", "surrogatepass")) <= size


@given(texts, sizes)
def test_whitespace_breaks_cost_at_most_twice_the_chunks(content: str, size: int) -> None:
    # A chunk cut short at a whitespace is followed by the long word that did not fit,
    # so two chunks in a row carry at least size - 3 bytes (a window of whole characters).
    total = len(content.encode("utf-8", "surrogatepass"))
    chunks = split_content(content, size)
    assert len(chunks) <= 2 * (total // (size - 3)) + 2


@given(st.text(min_size=1, max_size=20), st.integers(min_value=0, max_value=10_000))
def test_chunk_ids_name_the_logical_send_and_index(logical_id: str, index: int) -> None:
    client_id = chunk_client_message_id(logical_id, index)
    head, _, tail = client_id.rpartition(":")
    assert (head, int(tail)) == (logical_id, index)


@given(seqs, seqs)
def test_resume_seen_is_never_below_last_accepted_nor_observed(observed: int, last: int) -> None:
    seen = resume_seen(observed, last)
    assert seen >= last
    assert seen >= observed
    assert seen in (observed, last)


@given(seqs, seqs, st.booleans())
def test_the_next_chunk_never_goes_below_the_previous_accepted(
    observed: int, accepted_seq: int, replayed: bool
) -> None:
    previous = AcceptedChunk(
        index=0,
        client_message_id="reply:0",
        message_id="m-0",
        accepted_seq=accepted_seq,
        replayed=replayed,
    )
    seen = next_chunk_seen(observed_seq=observed, previous=previous)
    assert seen >= accepted_seq
    if not replayed:
        assert seen == accepted_seq
