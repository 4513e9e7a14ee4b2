"""The system clock, the UUIDv7 generator and API tokens."""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC

from turnkeeper.adapters.system import SystemClock, UuidV7Generator, uuid7_timestamp_ms
from turnkeeper.application.services.identity import hash_token, new_token


def test_clock_answers_aware_utc_times() -> None:
    assert SystemClock().now().tzinfo is UTC


def test_ids_are_version_7_with_the_rfc_9562_variant() -> None:
    value = UuidV7Generator().new_id()
    assert value.version == 7
    assert value.variant == uuid.RFC_4122


def test_ids_carry_the_millisecond_they_were_made_in() -> None:
    generator = UuidV7Generator(now_ms=lambda: 1_700_000_000_123)
    assert uuid7_timestamp_ms(generator.new_id()) == 1_700_000_000_123


def test_ids_within_one_millisecond_still_increase() -> None:
    generator = UuidV7Generator(now_ms=lambda: 1_700_000_000_000)
    ids = [generator.new_id() for _ in range(1000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)


def test_ids_keep_increasing_when_the_wall_clock_steps_back() -> None:
    times = iter([2_000, 1_000, 1_000])
    generator = UuidV7Generator(now_ms=lambda: next(times))
    first, second, third = (generator.new_id() for _ in range(3))
    assert first < second < third
    assert uuid7_timestamp_ms(second) == 2_000


def test_an_exhausted_counter_borrows_the_next_millisecond() -> None:
    # The first id takes the largest random value; the next must move to the next ms.
    generator = UuidV7Generator(now_ms=lambda: 5_000, random_bits=lambda bits: (1 << bits) - 1)
    first = generator.new_id()
    second = generator.new_id()
    assert first < second
    assert uuid7_timestamp_ms(second) == 5_001


def test_ids_sort_like_the_standard_library_parses_them() -> None:
    generator = UuidV7Generator()
    ids = [generator.new_id() for _ in range(50)]
    assert [uuid.UUID(str(i)) for i in ids] == ids
    assert sorted(str(i) for i in ids) == [str(i) for i in ids]


def test_tokens_are_long_random_and_prefixed() -> None:
    first, second = new_token(), new_token()
    assert first != second
    assert first.startswith("tk_")
    assert len(first) >= 40


def test_token_hashes_are_sha256() -> None:
    token = new_token()
    digest = hash_token(token)
    assert len(digest) == 32
    assert digest == hashlib.sha256(token.encode()).digest()
    assert hash_token(token + "x") != digest
