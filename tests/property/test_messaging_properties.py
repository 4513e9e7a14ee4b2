"""Properties of the message body rules and the payload digest."""

from __future__ import annotations

import uuid

import attrs
from hypothesis import assume, given
from hypothesis import strategies as st

from turnkeeper.domain import strategies
from turnkeeper.domain.errors import NUL, FieldError
from turnkeeper.domain.messaging import (
    Message,
    MessageDraft,
    audience_of,
    draft_errors,
    payload_digest,
    visible_to,
)
from turnkeeper.domain.text import is_blank
from turnkeeper.domain.world import PrincipalKind

MAX_BYTES = 64

uuids = st.uuids()
maybe_uuid = st.none() | uuids
audiences = st.none() | st.lists(uuids, max_size=4)
contents = st.text(max_size=80)
#: Text a store can hold: every character UTF-8 encodes (no lone surrogate) but NUL
#: (refused as invalid_character).
storable = st.characters(codec="utf-8", exclude_characters=NUL)


def fits(text: str) -> bool:
    return not is_blank(text) and len(text.encode("utf-8")) <= MAX_BYTES


valid_contents = st.text(storable, min_size=1, max_size=MAX_BYTES).filter(fits)


@given(uuids, contents, maybe_uuid, audiences)
def test_digest_is_deterministic(
    thread: uuid.UUID, content: str, reply_to: uuid.UUID | None, audience: list[uuid.UUID] | None
) -> None:
    first = payload_digest(thread, content, reply_to, audience)
    again = payload_digest(
        uuid.UUID(str(thread)),
        content,
        reply_to,
        list(reversed(audience)) if audience is not None else None,
    )
    assert first == again
    assert first.startswith("v1:")
    assert len(first) == len("v1:") + 64


@given(uuids, contents, contents, maybe_uuid, audiences)
def test_digest_changes_when_the_content_changes(
    thread: uuid.UUID,
    content: str,
    other: str,
    reply_to: uuid.UUID | None,
    audience: list[uuid.UUID] | None,
) -> None:
    assume(content != other)
    assert payload_digest(thread, content, reply_to, audience) != payload_digest(
        thread, other, reply_to, audience
    )


@given(uuids, uuids, contents)
def test_digest_changes_when_the_thread_changes(
    thread: uuid.UUID, other: uuid.UUID, content: str
) -> None:
    assume(thread != other)
    assert payload_digest(thread, content, None, None) != payload_digest(other, content, None, None)


@st.composite
def valid_agent_drafts(draw: st.DrawFn) -> MessageDraft:
    return MessageDraft(
        client_msg_id=draw(st.text(storable, min_size=1, max_size=20)),
        content=draw(valid_contents),
        mentions=tuple(draw(st.lists(uuids, max_size=4, unique=True))),
        reply_to_id=draw(maybe_uuid),
        restricted_to=draw(st.none() | st.lists(uuids, min_size=1, max_size=3).map(tuple)),
        run_id=draw(maybe_uuid),
    )


@given(valid_agent_drafts(), st.sampled_from([None, "text"]))
def test_valid_agent_drafts_within_limits_pass(draft: MessageDraft, kind: str | None) -> None:
    assert (
        draft_errors(draft, author_kind=PrincipalKind.AGENT, kind=kind, max_content_bytes=MAX_BYTES)
        == []
    )


@given(
    valid_agent_drafts(),
    uuids,
    st.sampled_from([PrincipalKind.PERSON, PrincipalKind.APP]),
    st.sampled_from(["", "/first_message"]),
)
def test_run_id_from_a_non_agent_always_fails_at_run_id(
    draft: MessageDraft, run_id: uuid.UUID, author: PrincipalKind, prefix: str
) -> None:
    with_run = MessageDraft(
        client_msg_id=draft.client_msg_id,
        content=draft.content,
        mentions=draft.mentions,
        run_id=run_id,
    )
    errors = draft_errors(
        with_run,
        author_kind=author,
        kind=None,
        max_content_bytes=MAX_BYTES,
        prefix=prefix,
        first_message=bool(prefix),
    )
    assert errors == [FieldError(pointer=f"{prefix}/run_id", code="run_mismatch")]


@given(st.text(max_size=40), st.integers(min_value=0, max_value=60))
def test_content_limit_counts_utf8_bytes(content: str, limit: int) -> None:
    draft = MessageDraft(client_msg_id="c", content=content)
    errors = draft_errors(
        draft, author_kind=PrincipalKind.PERSON, kind=None, max_content_bytes=limit
    )
    codes = {(e.pointer, e.code) for e in errors}
    if is_blank(content):
        assert codes == {("/content", "required")}
    elif NUL in content:
        assert codes == {("/content", "invalid_character")}
    elif len(content.encode("utf-8")) > limit:
        assert codes == {("/content", "too_long")}
    else:
        assert codes == set()


@given(st.text(min_size=1, max_size=40), st.integers(min_value=1, max_value=30))
def test_client_id_limit_counts_characters(client_id: str, limit: int) -> None:
    draft = MessageDraft(client_msg_id=client_id, content="hallo")
    errors = draft_errors(
        draft,
        author_kind=PrincipalKind.PERSON,
        kind=None,
        max_content_bytes=MAX_BYTES,
        max_client_id_length=limit,
    )
    codes = {(e.pointer, e.code) for e in errors}
    assert (("/client_msg_id", "too_long") in codes) == (len(client_id) > limit)


@given(st.text(storable, max_size=20), st.text(storable, max_size=20), st.booleans())
def test_a_nul_anywhere_in_a_text_member_is_an_invalid_character(
    before: str, after: str, in_content: bool
) -> None:
    with_nul = f"{before}{NUL}{after}x"
    draft = MessageDraft(
        client_msg_id="c" if in_content else with_nul,
        content=with_nul if in_content else "hello",
    )
    errors = draft_errors(
        draft, author_kind=PrincipalKind.PERSON, kind=None, max_content_bytes=MAX_BYTES * 4
    )
    member = "/content" if in_content else "/client_msg_id"
    assert errors == [FieldError(pointer=member, code="invalid_character")]


@st.composite
def _restricted_or_public(draw: st.DrawFn) -> Message:
    audience = draw(st.none() | st.lists(readers, max_size=3).map(tuple))
    return attrs.evolve(draw(strategies.messages()), restricted_to=audience)


#: Principals that may be authors, audience members or outsiders.
readers = st.sampled_from([uuid.UUID(int=n) for n in range(1, 6)])


@given(st.lists(_restricted_or_public(), max_size=4), st.lists(readers, min_size=1))
def test_the_audience_of_a_change_is_who_may_see_one_of_its_messages(
    messages: list[Message], probes: list[uuid.UUID]
) -> None:
    audience = audience_of(messages)
    if not messages or any(m.restricted_to is None for m in messages):
        assert audience is None
        return
    assert audience is not None
    assert len(set(audience)) == len(audience)
    for reader in {*probes, *audience, *(m.author_id for m in messages)}:
        assert (reader in audience) == any(visible_to(m, reader) for m in messages)
