"""Table tests of the session freshness frontiers and the chunking rules."""

from __future__ import annotations

import pytest

from turnkeeper.domain.freshness import (
    HELD_GUIDANCE,
    MessageFreshnessFrontier,
    SendState,
    SessionFreshnessState,
    note_latest,
    surface,
    surface_page,
    verdict,
)
from turnkeeper.domain.logical_sends import (
    PARTIAL_HELD_GUIDANCE,
    AcceptedChunk,
    LogicalSendState,
    chunk_client_message_id,
    logical_state,
    next_chunk_seen,
    resume_seen,
    split_content,
)

KEY = "thr_alex_sam"
OTHER = "thr_robin"


def frontier(
    observed: int = 0, latest: int | None = None, refresh: int = 0
) -> MessageFreshnessFrontier:
    return MessageFreshnessFrontier(
        target_key=KEY,
        observed_seq=observed,
        latest_known_seq=observed if latest is None else latest,
        needs_refresh_until_seq=refresh,
    )


def seqs(f: MessageFreshnessFrontier) -> tuple[int, int, int]:
    return (f.observed_seq, f.latest_known_seq, f.needs_refresh_until_seq)


# -- the frontier value -------------------------------------------------------------------


def test_a_new_target_starts_at_zero_and_passes() -> None:
    state = SessionFreshnessState()
    assert seqs(state.frontier(KEY)) == (0, 0, 0)
    assert state.check_send(KEY).hold is False


@pytest.mark.parametrize(
    ("observed", "latest", "refresh"),
    [(-1, 0, 0), (3, 2, 0), (3, 5, 3), (3, 5, 6), (0, 0, -1)],
    ids=[
        "negative",
        "latest-below-observed",
        "refresh-at-observed",
        "refresh-above-latest",
        "neg-refresh",
    ],
)
def test_a_frontier_refuses_broken_invariants(observed: int, latest: int, refresh: int) -> None:
    with pytest.raises(ValueError, match="must"):
        MessageFreshnessFrontier(
            target_key=KEY,
            observed_seq=observed,
            latest_known_seq=latest,
            needs_refresh_until_seq=refresh,
        )


SURFACE_CASES = [
    # (name, before (observed, latest, refresh), surfaced seq, after)
    ("advances", (3, 3, 0), 5, (5, 5, 0)),
    ("lower is ignored", (5, 5, 0), 3, (5, 5, 0)),
    ("equal is ignored", (5, 5, 0), 5, (5, 5, 0)),
    ("clears the refresh it covers", (3, 7, 7), 7, (7, 7, 0)),
    ("beyond the refresh clears it", (3, 7, 7), 9, (9, 9, 0)),
    ("partial refresh keeps the hint", (3, 7, 7), 5, (5, 7, 7)),
    ("from zero", (0, 0, 0), 1, (1, 1, 0)),
]


@pytest.mark.parametrize(
    ("before", "seq", "after"), [c[1:] for c in SURFACE_CASES], ids=[c[0] for c in SURFACE_CASES]
)
def test_surface_is_a_high_water_mark(
    before: tuple[int, int, int], seq: int, after: tuple[int, int, int]
) -> None:
    assert seqs(surface(frontier(*before), seq)) == after


PAGE_CASES = [
    # (name, before, after_seq, covers_through, after)
    ("a page from the start", (0, 0, 0), 0, 4, (4, 4, 0)),
    ("a page from the frontier", (3, 3, 0), 3, 6, (6, 6, 0)),
    ("a page overlapping the frontier", (3, 3, 0), 1, 6, (6, 6, 0)),
    ("a page after a gap surfaces nothing", (1, 1, 0), 2, 3, (1, 1, 0)),
    ("a gap keeps the refresh a hold needs", (1, 3, 3), 2, 3, (1, 3, 3)),
    ("a joined page clears the refresh", (1, 3, 3), 1, 3, (3, 3, 0)),
]


@pytest.mark.parametrize(
    ("before", "after_seq", "covers", "after"),
    [c[1:] for c in PAGE_CASES],
    ids=[c[0] for c in PAGE_CASES],
)
def test_a_history_page_surfaces_only_when_it_joins_the_frontier(
    before: tuple[int, int, int], after_seq: int, covers: int, after: tuple[int, int, int]
) -> None:
    assert seqs(surface_page(frontier(*before), after_seq, covers)) == after


HELD_CASES = [
    # (name, before, latest, needs_refresh_until, after)
    ("records latest and refresh", (3, 3, 0), 6, None, (3, 6, 6)),
    ("stale latest changes nothing", (6, 6, 0), 4, None, (6, 6, 0)),
    ("latest at observed changes nothing", (6, 6, 0), 6, None, (6, 6, 0)),
    ("keeps the higher hint", (3, 8, 8), 6, None, (3, 8, 8)),
    ("raises the hint", (3, 6, 6), 8, None, (3, 8, 8)),
    ("explicit refresh below latest", (3, 3, 0), 9, 7, (3, 9, 7)),
    ("explicit refresh at observed", (3, 3, 0), 9, 3, (3, 9, 0)),
]


@pytest.mark.parametrize(
    ("before", "latest", "refresh", "after"),
    [c[1:] for c in HELD_CASES],
    ids=[c[0] for c in HELD_CASES],
)
def test_a_held_answer_never_moves_observed(
    before: tuple[int, int, int], latest: int, refresh: int | None, after: tuple[int, int, int]
) -> None:
    assert seqs(note_latest(frontier(*before), latest, refresh)) == after


VERDICT_CASES = [
    # (name, frontier, seen given, hold, seen used)
    ("in step", (5, 5, 0), None, False, 5),
    ("latest ahead", (5, 7, 7), None, True, 5),
    ("latest ahead without hint", (5, 9, 0), None, True, 5),
    ("partial-send frontier behind", (5, 5, 0), 4, True, 4),
    ("partial-send frontier at latest", (5, 7, 7), 7, False, 7),
]


@pytest.mark.parametrize(
    ("before", "seen", "hold", "used"),
    [c[1:] for c in VERDICT_CASES],
    ids=[c[0] for c in VERDICT_CASES],
)
def test_the_local_verdict(
    before: tuple[int, int, int], seen: int | None, hold: bool, used: int
) -> None:
    v = verdict(frontier(*before), seen)
    assert (v.hold, v.seen_up_to_seq) == (hold, used)
    assert v.needs_refresh_until_seq == (before[1] if hold else 0)


def test_held_then_retry_with_a_new_id_is_held_locally_until_history_covers_it() -> None:
    state = SessionFreshnessState()
    state.mark_surfaced(KEY, 4, "m-4")
    state.mark_held(KEY, 6)
    assert state.frontier(KEY).observed_seq == 4
    first = state.check_send(KEY)
    assert (first.hold, first.seen_up_to_seq, first.latest_known_seq) == (True, 4, 6)
    state.mark_surfaced(KEY, 5)
    assert state.check_send(KEY).hold is True
    state.mark_surfaced(KEY, 6, "m-6")
    assert state.check_send(KEY).hold is False
    assert seqs(state.frontier(KEY)) == (6, 6, 0)
    assert state.frontier(KEY).source_message_id == "m-6"


def test_a_pending_delivery_holds_until_surfaced() -> None:
    state = SessionFreshnessState()
    state.mark_surfaced(KEY, 2)
    state.mark_pending(KEY, 3)
    assert state.frontier(KEY).observed_seq == 2
    assert state.check_send(KEY).hold is True
    state.mark_surfaced(KEY, 3)
    assert state.check_send(KEY).hold is False


def test_own_accepted_message_advances_observed() -> None:
    state = SessionFreshnessState()
    state.mark_surfaced(KEY, 2)
    state.mark_sent(KEY, 3, "mine")
    assert seqs(state.frontier(KEY)) == (3, 3, 0)
    assert state.frontier(KEY).source_message_id == "mine"


def test_targets_are_independent() -> None:
    state = SessionFreshnessState()
    state.mark_held(KEY, 9)
    state.mark_surfaced(OTHER, 2)
    assert state.check_send(KEY).hold is True
    assert state.check_send(OTHER).hold is False
    assert {f.target_key for f in state} == {KEY, OTHER}


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ({"state": SendState.SENT, "accepted_seq": 4}, (4, 4, 0)),
        ({"state": SendState.ALREADY_SENT, "accepted_seq": 2}, (3, 3, 0)),
        ({"state": SendState.HELD, "latest_seq": 6}, (3, 6, 6)),
        ({"state": SendState.HELD, "latest_seq": 6, "needs_refresh_until_seq": 5}, (3, 6, 5)),
    ],
    ids=["sent", "old-already-sent", "held", "held-with-hint"],
)
def test_record_answer(answer: dict[str, object], expected: tuple[int, int, int]) -> None:
    state = SessionFreshnessState({KEY: frontier(3)})
    state.record_answer(KEY, **answer)  # type: ignore[arg-type]
    assert seqs(state.frontier(KEY)) == expected


@pytest.mark.parametrize(
    "answer",
    [{"state": SendState.HELD}, {"state": SendState.SENT}, {"state": SendState.ALREADY_SENT}],
    ids=["held-without-latest", "sent-without-accepted", "replay-without-accepted"],
)
def test_record_answer_needs_its_members(answer: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="needs"):
        SessionFreshnessState().record_answer(KEY, **answer)  # type: ignore[arg-type]


def test_the_state_refuses_an_empty_key_and_negative_seqs() -> None:
    state = SessionFreshnessState()
    with pytest.raises(ValueError, match="target_key"):
        state.frontier("")
    with pytest.raises(ValueError, match="target_seq"):
        state.mark_surfaced(KEY, -1)
    with pytest.raises(ValueError, match="latest_seq"):
        state.mark_held(KEY, -1)


# -- chunking -----------------------------------------------------------------------------


def test_chunk_client_ids_are_deterministic() -> None:
    assert chunk_client_message_id("reply-7", 0) == "reply-7:0"
    assert chunk_client_message_id("reply-7", 12) == "reply-7:12"
    with pytest.raises(ValueError, match="logical_id"):
        chunk_client_message_id("", 0)
    with pytest.raises(ValueError, match="index"):
        chunk_client_message_id("reply-7", -1)


SPLIT_CASES = [
    ("empty", "", 8, ()),
    ("fits", "Hi Sam", 8, ("Hi Sam",)),
    ("exact", "12345678", 8, ("12345678",)),
    ("at a space", "Hello Alex and Sam", 8, ("Hello ", "Alex ", "and Sam")),
    ("long word is cut", "abcdefghijk", 4, ("abcd", "efgh", "ijk")),
    ("newline", "line one\nline two", 10, ("line one\n", "line two")),
    ("multibyte", "ääää", 4, ("ää", "ää")),
    ("four-byte char", "😀😀", 4, ("😀", "😀")),
    ("leading space not cut off alone", " abcdefgh", 4, (" abc", "defg", "h")),
]


@pytest.mark.parametrize(
    ("content", "size", "chunks"), [c[1:] for c in SPLIT_CASES], ids=[c[0] for c in SPLIT_CASES]
)
def test_split_content(content: str, size: int, chunks: tuple[str, ...]) -> None:
    assert split_content(content, size) == chunks


def test_split_content_needs_room_for_each_visible_character() -> None:
    assert split_content("Alex", 1) == ("A", "l", "e", "x")
    assert split_content("Sam ä", 2) == ("Sa", "m ", "ä")
    with pytest.raises(ValueError, match="cannot hold a character of 4 bytes"):
        split_content("Robin 😀", 3)
    with pytest.raises(ValueError, match="holds no character"):
        split_content("Alex", 0)


def accepted(index: int, seq: int, *, replayed: bool = False) -> AcceptedChunk:
    return AcceptedChunk(
        index=index,
        client_message_id=f"l:{index}",
        message_id=f"m{index}",
        accepted_seq=seq,
        replayed=replayed,
    )


@pytest.mark.parametrize(
    ("observed", "previous", "seen"),
    [
        (5, None, 5),
        (7, accepted(0, 6), 6),
        (9, accepted(0, 6, replayed=True), 9),
        (4, accepted(0, 6, replayed=True), 6),
    ],
    ids=["first-chunk", "after-sent-chunk", "resume-after-refresh", "resume-not-below-accepted"],
)
def test_next_chunk_seen(observed: int, previous: AcceptedChunk | None, seen: int) -> None:
    assert next_chunk_seen(observed_seq=observed, previous=previous) == seen


def test_resume_seen_is_the_larger() -> None:
    assert resume_seen(9, 6) == 9
    assert resume_seen(4, 6) == 6
    with pytest.raises(ValueError, match="negative"):
        resume_seen(-1, 0)


@pytest.mark.parametrize(
    ("count", "chunks", "held", "state"),
    [
        (2, (accepted(0, 1), accepted(1, 2)), False, LogicalSendState.SENT),
        (2, (accepted(0, 1, replayed=True), accepted(1, 2)), False, LogicalSendState.SENT),
        (
            2,
            (accepted(0, 1, replayed=True), accepted(1, 2, replayed=True)),
            False,
            LogicalSendState.ALREADY_SENT,
        ),
        (3, (accepted(0, 1),), True, LogicalSendState.PARTIAL_HELD),
        (3, (), True, LogicalSendState.HELD),
    ],
    ids=["sent", "resumed", "replayed", "partial", "held"],
)
def test_logical_state(
    count: int, chunks: tuple[AcceptedChunk, ...], held: bool, state: LogicalSendState
) -> None:
    assert logical_state(chunk_count=count, accepted=chunks, held=held) is state


@pytest.mark.parametrize(
    ("count", "chunks", "held"),
    [(1, (accepted(0, 1),), True), (2, (accepted(0, 1),), False), (0, (), False)],
    ids=["held-but-all-stored", "finished-but-missing", "no-chunks"],
)
def test_logical_state_refuses_outcomes_that_do_not_add_up(
    count: int, chunks: tuple[AcceptedChunk, ...], held: bool
) -> None:
    with pytest.raises(ValueError, match="chunk"):
        logical_state(chunk_count=count, accepted=chunks, held=held)


@pytest.mark.parametrize("text", [HELD_GUIDANCE, PARTIAL_HELD_GUIDANCE])
def test_guidance_names_no_internals(text: str) -> None:
    assert not any(ch.isdigit() for ch in text)
    for word in ("seq", "target_key", "chunk", "frontier", ":"):
        assert word not in text
    assert "\u2013" not in text
    assert "\u2014" not in text
