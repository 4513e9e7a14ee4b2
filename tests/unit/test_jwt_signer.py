"""The invocation token signer: a key too short for HS256 is refused when it is given."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from turnkeeper import JwtSigner, Settings, memory_backend, postgres_backend
from turnkeeper.adapters.tokens import MIN_SIGNING_KEY_BYTES
from turnkeeper.application.errors import InvalidToken
from turnkeeper.application.ports import InvocationClaims
from turnkeeper.domain.runs import TriggerKind

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
#: How long the claims of these tests stay valid after `NOW`.
VALIDITY = timedelta(minutes=5)
#: Keys shorter than the minimum: empty, a word, one byte short.
SHORT_KEYS = [b"", b"alexs", b"k" * (MIN_SIGNING_KEY_BYTES - 1)]


def _claims() -> InvocationClaims:
    return InvocationClaims(
        run_id=uuid.uuid4(),
        message_id=uuid.uuid4(),
        trigger_kind=TriggerKind.MESSAGE,
        sub=uuid.uuid4(),
        jti="jti-1",
        exp=NOW + VALIDITY,
    )


@pytest.mark.parametrize("key", SHORT_KEYS, ids=lambda k: f"{len(k)}-bytes")
def test_a_short_key_is_refused_when_the_signer_is_built(key: bytes) -> None:
    with pytest.raises(ValueError, match=f"at least {MIN_SIGNING_KEY_BYTES} bytes, got {len(key)}"):
        JwtSigner(key)


@pytest.mark.parametrize("key", SHORT_KEYS, ids=lambda k: f"{len(k)}-bytes")
def test_memory_backend_refuses_a_short_key(key: bytes) -> None:
    with pytest.raises(ValueError, match="signing key"):
        memory_backend(Settings(), key=key)


@pytest.mark.parametrize("key", SHORT_KEYS, ids=lambda k: f"{len(k)}-bytes")
async def test_postgres_backend_refuses_a_short_key_before_connecting(key: bytes) -> None:
    # A server nobody listens on: a pool opened first would fail on it, not on the key.
    nowhere = "postgresql://turnkeeper@127.0.0.1:1/turnkeeper?connect_timeout=1"
    with pytest.raises(ValueError, match="signing key"):
        async with postgres_backend(nowhere, Settings(), key):
            pass


def test_a_key_of_the_minimum_length_signs_and_verifies() -> None:
    # Under the suite's warnings-as-errors a PyJWT key-length warning would fail here.
    signer = JwtSigner(b"s" * MIN_SIGNING_KEY_BYTES)
    claims = _claims()
    assert signer.verify(signer.sign(claims), NOW) == claims
    with pytest.raises(InvalidToken):
        JwtSigner(b"r" * MIN_SIGNING_KEY_BYTES).verify(signer.sign(claims), NOW)
