"""Invocation tokens as JWTs (HS256, PyJWT), verified against the clock port.

Expiry is checked with the injected time, not the machine's, so tests move a fake clock
instead of sleeping. The key is shared by every server process of one deployment.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import jwt

from turnkeeper.application.errors import InvalidToken
from turnkeeper.application.ports import InvocationClaims
from turnkeeper.domain.runs import TriggerKind

_ALGORITHM = "HS256"
#: The shortest signing key, in bytes (of its UTF-8 encoding where it comes as text, as
#: `TURNKEEPER_SIGNING_KEY` does): HS256 wants a key at least as long as its hash, 256
#: bits (RFC 7518, section 3.2), and PyJWT only warns about a shorter one.
MIN_SIGNING_KEY_BYTES = 32
_REQUIRED = ("run_id", "message_id", "trigger_kind", "sub", "jti", "exp")


class JwtSigner:
    """Signs and verifies invocation tokens; satisfies `turnkeeper.application.ports.TokenSigner`.

    Args:
        key: the shared secret (at least `MIN_SIGNING_KEY_BYTES` bytes of entropy).

    Raises:
        ValueError: for a key shorter than `MIN_SIGNING_KEY_BYTES` (an empty one among
            them), refused here rather than at the first token signed with it.
    """

    def __init__(self, key: bytes) -> None:
        if len(key) < MIN_SIGNING_KEY_BYTES:
            raise ValueError(
                f"the signing key must be at least {MIN_SIGNING_KEY_BYTES} bytes, got {len(key)}"
            )
        self._key = key

    def sign(self, claims: InvocationClaims) -> str:
        """A signed token with the claims.

        Args:
            claims: the claims.

        Returns:
            The compact JWT.
        """
        return jwt.encode(
            {
                "run_id": str(claims.run_id),
                "message_id": str(claims.message_id),
                "trigger_kind": claims.trigger_kind.value,
                "sub": str(claims.sub),
                "jti": claims.jti,
                "exp": int(claims.exp.timestamp()),
            },
            self._key,
            algorithm=_ALGORITHM,
        )

    def verify(self, token: str, now: datetime) -> InvocationClaims:
        """The claims of a valid token.

        Args:
            token: the JWT.
            now: the time of the check (clock port).

        Returns:
            The claims.

        Raises:
            InvalidToken: ``malformed`` for a bad token or signature, ``expired`` after exp.
        """
        try:
            raw = jwt.decode(
                token,
                self._key,
                algorithms=[_ALGORITHM],
                options={"verify_exp": False, "require": list(_REQUIRED)},
            )
            claims = InvocationClaims(
                run_id=uuid.UUID(raw["run_id"]),
                message_id=uuid.UUID(raw["message_id"]),
                trigger_kind=TriggerKind(raw["trigger_kind"]),
                sub=uuid.UUID(raw["sub"]),
                jti=str(raw["jti"]),
                exp=datetime.fromtimestamp(int(raw["exp"]), tz=UTC),
            )
        except (jwt.PyJWTError, ValueError, TypeError, KeyError):
            raise InvalidToken("malformed") from None
        if now >= claims.exp:
            raise InvalidToken("expired")
        return claims
