"""The idempotency rule on a message read by client id, with the digest a request had
before its inputs were read as stored, and the digests earlier versions stored
(`replayed`'s ``earlier``)."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable, Collection, Mapping

import attrs
import pytest

from tests.support.domain_world import T0, fixed_id
from turnkeeper.application.services.messages_append import draft_digests, replayed
from turnkeeper.domain.errors import IdempotencyConflict
from turnkeeper.domain.messaging import Message, MessageDraft, MessageKind, Origin

STORED = Message(
    id=fixed_id(8, 1),
    thread_id=fixed_id(8, 2),
    thread_seq=1,
    author_id=fixed_id(8, 3),
    origin=Origin.HUMAN,
    kind=MessageKind.TEXT,
    content="Only for Sam",
    client_msg_id="R1",
    digest="v1:stored",
    created_at=T0,
)


def _never() -> tuple[str, ...]:
    raise AssertionError("the earlier digest is read only when the digests differ")


def test_the_same_digest_replays_without_the_earlier_one() -> None:
    assert replayed(STORED, "v1:stored", _never) is STORED


def test_a_message_stored_with_the_requests_earlier_digest_replays() -> None:
    assert replayed(STORED, "v1:as-stored-now", lambda: ("v1:before", "v1:stored")) is STORED


@pytest.mark.parametrize("earlier", [None, lambda: ("v1:other",), tuple])
def test_another_digest_is_a_conflict(earlier: Callable[[], Collection[str]] | None) -> None:
    with pytest.raises(IdempotencyConflict):
        replayed(STORED, "v1:as-stored-now", earlier)


def test_a_new_key_reads_no_digest() -> None:
    assert replayed(None, "v1:as-stored-now", _never) is None


# -- requests stored by earlier versions --------------------------------------------------
#
# The digests earlier versions stored, written out here as they computed them: a newer
# server must replay their retries (docs/messages.md, "Idempotency"). The digest kept its
# ``v1:`` prefix across these changes, so each earlier form stays readable.

PLACE = fixed_id(8, 4)
AUTHOR = fixed_id(8, 3)
SAM, ROBIN = fixed_id(8, 5), fixed_id(8, 6)


def _v1(parts: Mapping[str, object]) -> str:
    canonical = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "v1:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _stored(digest: str) -> Message:
    return attrs.evolve(STORED, digest=digest)


def _replays(stored: Message, digests: tuple[str, Callable[[], Collection[str]]]) -> bool:
    return replayed(stored, *digests) is stored


@pytest.mark.parametrize("title", ["Printer down", None, "", "  "])
@pytest.mark.parametrize("audience", [None, [SAM], [SAM, SAM, ROBIN]])
def test_a_thread_stored_with_its_title_joined_to_the_content_replays(
    title: str | None, audience: list[uuid.UUID] | None
) -> None:
    # Before 2026-12-06 a thread's digest joined the title and the content with a line
    # break, covered no reply, and kept the audience as a sorted list with its repeats.
    parts: dict[str, object] = {
        "thread": str(PLACE),
        "content": f"{title or ''}\nFirst",
        "reply_to": "",
    }
    if audience is not None:
        parts["restricted_to"] = sorted(str(p) for p in audience)
    draft = MessageDraft(
        client_msg_id="T1",
        content="First",
        restricted_to=None if audience is None else tuple(audience),
    )
    digests = draft_digests(PLACE, draft, AUTHOR, first_of_thread=True, title=title)
    assert _replays(_stored(_v1(parts)), digests)


def test_a_thread_stored_with_its_title_joined_is_no_replay_of_other_text() -> None:
    parts = {"thread": str(PLACE), "content": "Printer down\nFirst", "reply_to": ""}
    draft = MessageDraft(client_msg_id="T1", content="Other", restricted_to=None)
    digests = draft_digests(PLACE, draft, AUTHOR, first_of_thread=True, title="Printer down")
    with pytest.raises(IdempotencyConflict):
        replayed(_stored(_v1(parts)), *digests)


@pytest.mark.parametrize("first_of_thread", [False, True])
def test_an_audience_stored_with_its_repeats_replays(first_of_thread: bool) -> None:
    # Before 2026-12-06 the audience was a sorted list that kept a repeated id.
    audience = [ROBIN, SAM, ROBIN]
    parts: dict[str, object] = {
        "thread": str(PLACE),
        "content": "Only for you",
        "reply_to": "",
        "restricted_to": sorted(str(p) for p in audience),
    }
    if first_of_thread:
        parts["title"] = ""
    draft = MessageDraft(client_msg_id="R1", content="Only for you", restricted_to=tuple(audience))
    digests = draft_digests(PLACE, draft, AUTHOR, first_of_thread=first_of_thread, title=None)
    assert _replays(_stored(_v1(parts)), digests)


@pytest.mark.parametrize("title", ["\x1f", " \x1c\x1d\x1e "])
def test_a_thread_whose_title_of_separators_counted_as_none_replays(title: str) -> None:
    # Before 2026-12-07 the information separators U+001C to U+001F were white space: a
    # title of them alone counted as none, and the digest held no title (an audit saw
    # the retry answered 409).
    draft = MessageDraft(client_msg_id="T1", content="First", restricted_to=None)
    stored, _ = draft_digests(PLACE, draft, AUTHOR, first_of_thread=True, title=None)
    digests = draft_digests(PLACE, draft, AUTHOR, first_of_thread=True, title=title)
    assert digests[0] != stored
    assert _replays(_stored(stored), digests)


def test_a_title_with_separators_and_text_was_no_blank_title() -> None:
    draft = MessageDraft(client_msg_id="T1", content="First", restricted_to=None)
    stored, _ = draft_digests(PLACE, draft, AUTHOR, first_of_thread=True, title=None)
    digests = draft_digests(PLACE, draft, AUTHOR, first_of_thread=True, title="\x1fPlans")
    with pytest.raises(IdempotencyConflict):
        replayed(_stored(stored), *digests)
