"""Table tests of the message body rules, the payload digest and visibility."""

from __future__ import annotations

import hashlib
import inspect
import json
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.domain_world import T0, fixed_id
from turnkeeper.domain.errors import FieldError, ValidationFailed, reject_invalid
from turnkeeper.domain.messaging import (
    Message,
    MessageDraft,
    MessageKind,
    Origin,
    TriggerState,
    audience_of,
    content_errors,
    draft_errors,
    origin_for,
    payload_digest,
    title_from_content,
    trigger_reason,
    visible_to,
)
from turnkeeper.domain.world import PrincipalKind

PERSON, AGENT, APP = PrincipalKind.PERSON, PrincipalKind.AGENT, PrincipalKind.APP
MAX = 10
RUN = fixed_id(7, 1)
THREAD = fixed_id(5, 1)
OTHER_THREAD = fixed_id(5, 2)
REPLY = fixed_id(8, 1)
ALEX, SAM, ROBIN = fixed_id(1, 2), fixed_id(1, 3), fixed_id(1, 1)


def draft(content: str = "hallo", **changes: object) -> MessageDraft:
    values: dict[str, object] = {"client_msg_id": "c-1", "content": content, **changes}
    return MessageDraft(**values)  # type: ignore[arg-type]


def errors_of(
    d: MessageDraft,
    *,
    author: PrincipalKind = PERSON,
    kind: str | None = None,
    first_message: bool = False,
) -> set[FieldError]:
    """The field errors the rules report, or the empty set when they accept."""
    errors = draft_errors(
        d,
        author_kind=author,
        kind=kind,
        max_content_bytes=MAX,
        prefix="/first_message" if first_message else "",
        first_message=first_message,
    )
    assert len(set(errors)) == len(errors), "a member reported twice"
    return set(errors)


def fe(pointer: str, code: str) -> FieldError:
    return FieldError(pointer=pointer, code=code)


# --- draft_errors ---------------------------------------------------------------

CREATE_CASES: list[tuple[str, MessageDraft, PrincipalKind, str | None, bool, set[FieldError]]] = [
    ("text-kind-ok", draft(), PERSON, "text", False, set()),
    ("absent-kind-ok", draft(), PERSON, None, False, set()),
    ("kind-system", draft(), PERSON, "system", False, {fe("/kind", "invalid_enum")}),
    ("kind-run", draft(), PERSON, "run", False, {fe("/kind", "invalid_enum")}),
    ("kind-run-from-agent", draft(), AGENT, "run", False, {fe("/kind", "invalid_enum")}),
    ("kind-upper-case", draft(), PERSON, "TEXT", False, {fe("/kind", "invalid_enum")}),
    ("kind-empty-string", draft(), PERSON, "", False, {fe("/kind", "invalid_enum")}),
    (
        "first-message-kind-system",
        draft(),
        PERSON,
        "system",
        True,
        {fe("/first_message/kind", "invalid_enum")},
    ),
    ("empty-content", draft(""), PERSON, None, False, {fe("/content", "required")}),
    ("blank-content", draft(" \n\t "), PERSON, None, False, {fe("/content", "required")}),
    (
        "first-message-empty-content",
        draft(""),
        PERSON,
        None,
        True,
        {fe("/first_message/content", "required")},
    ),
    (
        "missing-client-msg-id",
        draft(client_msg_id=""),
        PERSON,
        None,
        False,
        {fe("/client_msg_id", "required")},
    ),
    # Content is counted in UTF-8 bytes, not characters.
    ("ascii-at-max", draft("a" * MAX), PERSON, None, False, set()),
    ("ascii-over-max", draft("a" * (MAX + 1)), PERSON, None, False, {fe("/content", "too_long")}),
    ("two-byte-at-max", draft("ä" * 5), PERSON, None, False, set()),
    ("two-byte-over-max", draft("ä" * 5 + "a"), PERSON, None, False, {fe("/content", "too_long")}),
    ("six-chars-twelve-bytes", draft("ä" * 6), PERSON, None, False, {fe("/content", "too_long")}),
    ("four-byte-at-max", draft("😀😀ab"), PERSON, None, False, set()),
    ("four-byte-over-max", draft("😀😀abc"), PERSON, None, False, {fe("/content", "too_long")}),
    ("three-byte-over-max", draft("€€€€"), PERSON, None, False, {fe("/content", "too_long")}),
    # run_id belongs to agents answering a run, never to a new thread's first message.
    ("run-id-from-person", draft(run_id=RUN), PERSON, None, False, {fe("/run_id", "run_mismatch")}),
    ("run-id-from-app", draft(run_id=RUN), APP, None, False, {fe("/run_id", "run_mismatch")}),
    ("run-id-from-agent", draft(run_id=RUN), AGENT, None, False, set()),
    *[
        (
            f"first-message-run-id-from-{k.value}",
            draft(run_id=RUN),
            k,
            None,
            True,
            {fe("/first_message/run_id", "run_mismatch")},
        )
        for k in PrincipalKind
    ],
    ("agent-first-message-ok", draft(), AGENT, "text", True, set()),
    (
        "duplicate-mentions",
        draft(mentions=(ALEX, SAM, ALEX)),
        PERSON,
        None,
        False,
        {fe("/mentions", "duplicate")},
    ),
    ("distinct-mentions", draft(mentions=(ALEX, SAM)), PERSON, None, False, set()),
    (
        "several-errors-at-once",
        draft("", client_msg_id="", run_id=RUN, mentions=(SAM, SAM)),
        PERSON,
        "system",
        False,
        {
            fe("/kind", "invalid_enum"),
            fe("/client_msg_id", "required"),
            fe("/content", "required"),
            fe("/run_id", "run_mismatch"),
            fe("/mentions", "duplicate"),
        },
    ),
    (
        "several-errors-first-message",
        draft("ä" * 6, run_id=RUN),
        AGENT,
        "run",
        True,
        {
            fe("/first_message/kind", "invalid_enum"),
            fe("/first_message/content", "too_long"),
            fe("/first_message/run_id", "run_mismatch"),
        },
    ),
]


@pytest.mark.parametrize(
    ("d", "author", "kind", "first_message", "expected"),
    [c[1:] for c in CREATE_CASES],
    ids=[c[0] for c in CREATE_CASES],
)
def test_draft_errors(
    d: MessageDraft,
    author: PrincipalKind,
    kind: str | None,
    first_message: bool,
    expected: set[FieldError],
) -> None:
    assert errors_of(d, author=author, kind=kind, first_message=first_message) == expected


def test_errors_come_in_a_stable_order() -> None:
    errors = draft_errors(
        draft("", run_id=RUN), author_kind=PERSON, kind="run", max_content_bytes=MAX
    )
    assert [e.pointer for e in errors] == ["/kind", "/content", "/run_id"]


def test_one_validation_failed_carries_every_error() -> None:
    errors = draft_errors(
        draft("", run_id=RUN), author_kind=PERSON, kind=None, max_content_bytes=MAX
    )
    with pytest.raises(ValidationFailed) as caught:
        reject_invalid(errors)
    assert caught.value.code == "validation_failed"
    assert caught.value.errors == tuple(errors)
    reject_invalid([])


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("hallo", []),
        (" \n", [("/x/content", "required")]),
        ("\u3000\x85\u2028", [("/x/content", "required")]),
        # Control characters, not white space (Python's strip took them for it).
        ("\x1c\x1d\x1e\x1f", []),
        ("ü" * MAX, [("/x/content", "too_long")]),
    ],
)
def test_content_errors_take_a_pointer_prefix(
    content: str, expected: list[tuple[str, str]]
) -> None:
    errors = content_errors(content, max_content_bytes=MAX, prefix="/x")
    assert [(e.pointer, e.code) for e in errors] == expected


# --- payload_digest -------------------------------------------------------------------


def digest(
    thread: uuid.UUID = THREAD,
    content: str = "hallo",
    reply_to: uuid.UUID | None = None,
    restricted_to: list[uuid.UUID] | None = None,
) -> str:
    return payload_digest(thread, content, reply_to, restricted_to)


def test_digest_is_stable_and_versioned() -> None:
    value = digest()
    assert value == digest()
    prefix, _, hexdigest = value.partition(":")
    assert prefix == "v1"
    assert len(hexdigest) == 64
    assert int(hexdigest, 16) >= 0


def test_digest_is_pinned_for_stored_messages() -> None:
    # Stored digests must keep matching: a change of the canonical form needs a new prefix.
    canonical = json.dumps(
        {"content": "hallo", "reply_to": "", "thread": str(THREAD)},
        separators=(",", ":"),
        ensure_ascii=False,
    )
    assert digest() == "v1:" + hashlib.sha256(canonical.encode()).hexdigest()


DIGEST_VARIANTS = {
    "other-thread": {"thread": OTHER_THREAD},
    "other-content": {"content": "hallo!"},
    "content-case": {"content": "Hallo"},
    "content-trailing-space": {"content": "hallo "},
    "with-reply-to": {"reply_to": REPLY},
    "with-restricted-to": {"restricted_to": [ALEX]},
    "wider-restricted-to": {"restricted_to": [ALEX, SAM]},
}


@pytest.mark.parametrize("changes", DIGEST_VARIANTS.values(), ids=DIGEST_VARIANTS.keys())
def test_digest_differs_when_a_covered_part_differs(changes: dict[str, object]) -> None:
    assert digest(**changes) != digest()  # type: ignore[arg-type]


def test_digest_tells_reply_targets_and_audiences_apart() -> None:
    assert digest(reply_to=REPLY) != digest(reply_to=fixed_id(8, 2))
    assert digest(restricted_to=[ALEX]) != digest(restricted_to=[SAM])


def test_digest_does_not_depend_on_the_order_of_restricted_to() -> None:
    assert digest(restricted_to=[ALEX, SAM, ROBIN]) == digest(restricted_to=[ROBIN, ALEX, SAM])


def test_digest_takes_restricted_to_as_a_set() -> None:
    assert digest(restricted_to=[SAM, ALEX, SAM]) == digest(restricted_to=[ALEX, SAM])
    assert digest(restricted_to=[SAM, SAM]) != digest(restricted_to=[SAM, ALEX])


@given(audience=st.lists(st.sampled_from([ALEX, SAM, ROBIN]), min_size=1))
def test_digest_of_an_audience_is_the_digest_of_its_set(audience: list[uuid.UUID]) -> None:
    assert digest(restricted_to=audience) == digest(restricted_to=sorted(set(audience)))


def test_digest_has_no_run_id_or_freshness_part() -> None:
    parameters = list(inspect.signature(payload_digest).parameters)
    # createThread's title is a member of its own (createMessage and sends give none);
    # audience_repeats reads the audience as digests stored before it was a set did.
    assert parameters == [
        "thread_id",
        "content",
        "reply_to_id",
        "restricted_to",
        "title",
        "audience_repeats",
    ]


def test_a_title_is_a_member_of_its_own() -> None:
    joined = payload_digest(THREAD, "Plans\nfor Sam\nDraft", None, None, title="")
    assert payload_digest(THREAD, "Draft", None, None, title="Plans\nfor Sam") != joined
    assert payload_digest(THREAD, "Draft", None, None, title="") != payload_digest(
        THREAD, "Draft", None, None
    )


def test_digest_tells_public_from_author_only() -> None:
    assert payload_digest(THREAD, "hallo", None, None) != payload_digest(THREAD, "hallo", None, ())


# --- visible_to -----------------------------------------------------------------------


def message(restricted_to: tuple[uuid.UUID, ...] | None) -> Message:
    return Message(
        id=fixed_id(8, 9),
        thread_id=THREAD,
        thread_seq=1,
        author_id=ALEX,
        origin=Origin.HUMAN,
        kind=MessageKind.TEXT,
        content="psst",
        restricted_to=restricted_to,
        created_at=T0,
    )


VISIBILITY_CASES = [
    ("public-to-anyone", None, SAM, True),
    ("public-to-author", None, ALEX, True),
    ("restricted-to-member", (SAM,), SAM, True),
    ("restricted-to-author", (SAM,), ALEX, True),
    ("restricted-to-outsider", (SAM,), ROBIN, False),
    ("empty-audience-to-author", (), ALEX, True),
    ("empty-audience-to-other", (), SAM, False),
]


@pytest.mark.parametrize(
    ("restricted_to", "reader", "expected"),
    [c[1:] for c in VISIBILITY_CASES],
    ids=[c[0] for c in VISIBILITY_CASES],
)
def test_visible_to(
    restricted_to: tuple[uuid.UUID, ...] | None, reader: uuid.UUID, expected: bool
) -> None:
    assert visible_to(message(restricted_to), reader) is expected


# --- audience_of ------------------------------------------------------------------------

AUDIENCE_CASES = [
    ("no-message", [], None),
    ("one-public", [None], None),
    ("public-among-restricted", [(SAM,), None], None),
    ("one-restricted", [(SAM,)], (ALEX, SAM)),
    ("author-only", [()], (ALEX,)),
    ("two-audiences-joined-once", [(SAM,), (SAM, ROBIN)], (ALEX, SAM, ROBIN)),
]


@pytest.mark.parametrize(
    ("audiences", "expected"),
    [c[1:] for c in AUDIENCE_CASES],
    ids=[c[0] for c in AUDIENCE_CASES],
)
def test_audience_of(
    audiences: list[tuple[uuid.UUID, ...] | None], expected: tuple[uuid.UUID, ...] | None
) -> None:
    assert audience_of([message(a) for a in audiences]) == expected


# --- title_from_content and origin_for ------------------------------------------------

TITLE_CASES = [
    ("single-line", "Wochenbericht", "Wochenbericht"),
    ("first-of-several", "Wochenbericht\nDetails folgen", "Wochenbericht"),
    ("skips-blank-lines", "\n  \n  Titel  \nRest", "Titel"),
    ("windows-line-ends", "Titel\r\nRest", "Titel"),
    ("strips-tabs", "\tTitel\t\n", "Titel"),
    ("empty", "", ""),
    ("only-blank", "  \n \n", ""),
    ("unicode-line-breaks", "\u2028 Titel\u3000\x85Rest", "Titel"),
    ("separators-are-no-line-breaks", "x\x1cy\x1dz\nRest", "x\x1cy\x1dz"),
    ("separators-are-no-white-space", "\x1fTitel\x1f", "\x1fTitel\x1f"),
]


@pytest.mark.parametrize(
    ("content", "expected"), [c[1:] for c in TITLE_CASES], ids=[c[0] for c in TITLE_CASES]
)
def test_title_from_content(content: str, expected: str) -> None:
    assert title_from_content(content) == expected


@pytest.mark.parametrize(
    ("kind", "origin"),
    [(PERSON, Origin.HUMAN), (AGENT, Origin.AGENT), (APP, Origin.APP)],
    ids=["person-human", "agent-agent", "app-app"],
)
def test_origin_comes_from_the_principal_kind(kind: PrincipalKind, origin: Origin) -> None:
    assert origin_for(kind) is origin


def test_no_principal_kind_gets_the_system_origin() -> None:
    assert Origin.SYSTEM not in {origin_for(k) for k in PrincipalKind}


@pytest.mark.parametrize(
    ("client_id", "prefix", "expected"),
    [
        ("c" * 8, "", set()),
        ("c" * 9, "", {fe("/client_msg_id", "too_long")}),
        ("ä" * 8, "", set()),  # characters, not bytes
        ("c" * 9, "/first_message", {fe("/first_message/client_msg_id", "too_long")}),
    ],
)
def test_a_client_id_longer_than_the_limit_is_too_long(
    client_id: str, prefix: str, expected: set[FieldError]
) -> None:
    found = draft_errors(
        draft(client_msg_id=client_id),
        author_kind=PERSON,
        kind=None,
        max_content_bytes=MAX,
        max_client_id_length=8,
        prefix=prefix,
        first_message=bool(prefix),
    )
    assert set(found) == expected


@pytest.mark.parametrize(
    ("state", "kept"),
    [
        (TriggerState.RECEIVED, None),
        (TriggerState.QUEUED, None),
        (TriggerState.WORKING, None),
        (TriggerState.DONE, None),
        (TriggerState.FOLLOWUP_DELIVERED, None),
        (TriggerState.FAILED, "no_trigger_right"),
        (TriggerState.CANCELLED, "no_trigger_right"),
    ],
)
def test_a_trigger_state_keeps_a_reason_only_when_failed_or_cancelled(
    state: TriggerState, kept: str | None
) -> None:
    assert trigger_reason(state, "no_trigger_right") == kept
    assert trigger_reason(state, None) is None
