"""The idempotency rule on a message read by client id, with the digest a request had
before its inputs were read as stored (`replayed`'s ``earlier``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.support.domain_world import T0, fixed_id
from turnkeeper.application.services.messages_append import replayed
from turnkeeper.domain.errors import IdempotencyConflict
from turnkeeper.domain.messaging import Message, MessageKind, Origin

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


def _never() -> str:
    raise AssertionError("the earlier digest is read only when the digests differ")


def test_the_same_digest_replays_without_the_earlier_one() -> None:
    assert replayed(STORED, "v1:stored", _never) is STORED


def test_a_message_stored_with_the_requests_earlier_digest_replays() -> None:
    assert replayed(STORED, "v1:as-stored-now", lambda: "v1:stored") is STORED


@pytest.mark.parametrize("earlier", [None, lambda: "v1:other"])
def test_another_digest_is_a_conflict(earlier: Callable[[], str] | None) -> None:
    with pytest.raises(IdempotencyConflict):
        replayed(STORED, "v1:as-stored-now", earlier)


def test_a_new_key_reads_no_digest() -> None:
    assert replayed(None, "v1:as-stored-now", _never) is None
