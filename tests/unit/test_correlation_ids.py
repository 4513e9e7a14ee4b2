"""New correlation ids: version 4 UUIDs in canonical text, distinct, and new in a forked child."""

from __future__ import annotations

import os
import uuid

import pytest

from turnkeeper.adapters.http.correlation import (
    CORRELATION_ID_MAX_CHARS,
    _IdSource,
    correlation_id_of,
)

#: Ids drawn per check (enough that a broken version or variant mask shows at once).
DRAWS = 2_000


def test_every_new_id_is_a_canonical_version_4_uuid_and_none_repeats() -> None:
    source = _IdSource()
    drawn = [source.new() for _ in range(DRAWS)]
    for text in drawn:
        parsed = uuid.UUID(text)
        assert (parsed.version, parsed.variant, str(parsed)) == (4, uuid.RFC_4122, text)
    assert len(set(drawn)) == DRAWS


def test_the_random_bits_reach_every_free_digit() -> None:
    # 122 free bits: each free hex digit takes more than one value over many draws.
    source = _IdSource()
    drawn = [source.new().replace("-", "") for _ in range(DRAWS)]
    fixed = {12}  # the version digit; the variant digit (16) keeps 4 values
    for index in range(32):
        seen = {text[index] for text in drawn}
        if index in fixed:
            assert seen == {"4"}
        elif index == 16:
            assert seen == set("89ab")
        else:
            assert len(seen) > 1, index


def test_a_forked_child_draws_other_ids_than_its_parent() -> None:
    source = _IdSource()
    source.new()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe and exits
        try:
            os.write(write, source.new().encode("ascii"))
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        child = pipe.read().decode("ascii")
    os.waitpid(pid, 0)
    # Without the reseed at fork the child's generator is the parent's, id for id.
    assert uuid.UUID(child).version == 4
    assert child != source.new()


def test_a_scope_keeps_its_id_and_an_acceptable_client_id_is_echoed() -> None:
    scope: dict[str, object] = {"headers": []}
    first = correlation_id_of(scope)
    assert correlation_id_of(scope) == first
    assert uuid.UUID(first).version == 4
    given: dict[str, object] = {"headers": [(b"x-correlation-id", b"trace-7")]}
    assert correlation_id_of(given) == "trace-7"
    hostile: dict[str, object] = {"headers": [(b"x-correlation-id", b"a\r\nb")]}
    assert correlation_id_of(hostile) != "a\r\nb"


@pytest.mark.parametrize(
    "given",
    ["trace-7", "order/42", "req 42", "a,b", "x", "~!@#$%^&*()", "a" * CORRELATION_ID_MAX_CHARS],
)
def test_a_printable_client_id_is_echoed(given: str) -> None:
    scope: dict[str, object] = {"headers": [(b"x-correlation-id", given.encode("latin-1"))]}
    assert correlation_id_of(scope) == given


@pytest.mark.parametrize(
    "given",
    [
        b"",
        b" lead",
        b"trail ",
        b"a\tb",
        b"a\r\nb",
        b"a\x1b[31mb",
        b"caf\xe9",
        b"a\x7fb",
        b"a" * (CORRELATION_ID_MAX_CHARS + 1),
    ],
)
def test_any_other_client_id_is_replaced_by_a_new_one(given: bytes) -> None:
    scope: dict[str, object] = {"headers": [(b"x-correlation-id", given)]}
    assert uuid.UUID(correlation_id_of(scope)).version == 4
