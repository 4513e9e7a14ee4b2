"""The problem answers each route documents: one catalogue of real answers.

`problems` documents the problem answers a route gives: the common ones of every route
(`COMMON`) and the route's own, named from the catalogue `PROBLEM_EXAMPLES`. Each
example is an answer the server gives, rendered by the same function as the answers
themselves (`turnkeeper.adapters.http.problems.problem_of`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Literal

import attrs
import msgspec
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import Example

from turnkeeper.adapters.http.answers import FieldErrorOut, Problem
from turnkeeper.adapters.http.problems import (
    PROBLEM_MEDIA_TYPE,
    ProblemAnswer,
    problem_of,
)
from turnkeeper.application.services.runs.views import RunView, run_document
from turnkeeper.domain.followups import FollowupState
from turnkeeper.domain.runs import Run, RunState

#: What the description of each problem status says after the codes of its examples.
_NOTES: dict[int, str] = {
    400: "errors[] names each offending member (pointer) with its code",
    401: "missing, unknown or revoked bearer token",
    403: "the caller may not do this here; reason says why",
    404: "unknown, or not readable by the caller (identical answers)",
    408: "the body did not arrive within http.body_timeout",
    409: "the request does not fit the stored state",
    413: "the body exceeds http.max_body_bytes",
    415: "a body whose Content-Type is not JSON",
    429: "see Retry-After",
    500: "an unexpected error (nothing of it is shown)",
    503: (
        "the database is unreachable or did not answer within "
        "database.request_timeout; see Retry-After"
    ),
}

#: The correlation id the examples show (answers echo the request's or make a new one).
EXAMPLE_CORRELATION_ID = "01950c3a-7f10-7c2e-9a41-3d5e8b2f6a10"


@attrs.frozen
class ProblemExample:
    """One documented problem answer: a real answer of this server.

    Attributes:
        summary: when the server gives it.
        answer: the problem as `turnkeeper.adapters.http.problems.problem_for` maps it
            (same status, code, reason, errors and ``current``), rendered by
            `problem_of` as the answers themselves are.
    """

    summary: str
    answer: ProblemAnswer


#: The names of the problem answers a route can document (`PROBLEM_EXAMPLES`).
ProblemName = Literal[
    "unknown_member",
    "content_required",
    "first_content_required",
    "run_mismatch",
    "freshness_required",
    "client_message_id_required",
    "target_key_mismatch",
    "patch_target_missing",
    "unauthenticated",
    "level_insufficient",
    "owner_required",
    "agents_only",
    "not_run_agent",
    "channel_archived",
    "token_malformed",
    "token_expired",
    "token_run_mismatch",
    "token_superseded",
    "not_found",
    "request_timeout",
    "run_not_active",
    "idempotency_conflict",
    "invalid_state_transition",
    "base_version_conflict",
    "payload_too_large",
    "unsupported_media_type",
    "message_rate_limited",
    "stream_limit",
    "internal",
    "unavailable",
]

#: The problems every authenticated route can answer (each reads the database: 503).
COMMON: tuple[ProblemName, ...] = (
    "unknown_member",
    "unauthenticated",
    "not_found",
    "payload_too_large",
    "unsupported_media_type",
    "internal",
    "unavailable",
)


def _invalid(summary: str, pointer: str, code: str) -> ProblemExample:
    return ProblemExample(
        summary,
        ProblemAnswer(
            code="validation_failed",
            status=400,
            errors=(FieldErrorOut(pointer=pointer, code=code),),
        ),
    )


def _refused(summary: str, code: str, status: int, reason: str | None = None) -> ProblemExample:
    return ProblemExample(summary, ProblemAnswer(code=code, status=status, reason=reason))


def _example_run() -> Run:
    """The run the base_version_conflict example shows as ``current``."""
    at = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    return Run(
        id=uuid.UUID("01950c3a-7f10-7c2e-9a41-3d5e8b2f6a11"),
        thread_id=uuid.UUID("01950c3a-7f10-7c2e-9a41-3d5e8b2f6a12"),
        agent_id=uuid.UUID("01950c3a-7f10-7c2e-9a41-3d5e8b2f6a13"),
        state=RunState.RUNNING,
        triggering_message_id=uuid.UUID("01950c3a-7f10-7c2e-9a41-3d5e8b2f6a14"),
        triggered_by=uuid.UUID("01950c3a-7f10-7c2e-9a41-3d5e8b2f6a15"),
        version=3,
        created_at=at,
        updated_at=at,
    )


#: The follow-up the example run has acknowledged (its version 3 counts that change).
_EXAMPLE_FOLLOWUP = uuid.UUID("01950c3a-7f10-7c2e-9a41-3d5e8b2f6a16")

#: Every problem answer a route can document, by name. Each is an answer the server
#: gives (same status, code, reason and errors), not invented values; a route names the
#: ones it gives (`problems`).
PROBLEM_EXAMPLES: Mapping[ProblemName, ProblemExample] = {
    "unknown_member": _invalid("a member the route does not know", "/origin", "unknown_member"),
    "content_required": _invalid("a message whose content is blank", "/content", "required"),
    "first_content_required": _invalid(
        "a first message whose content is blank", "/first_message/content", "required"
    ),
    "run_mismatch": _invalid(
        "a run_id that names no active run of the calling agent in this thread",
        "/run_id",
        "run_mismatch",
    ),
    "freshness_required": _invalid(
        "a send without freshness (freshness.required_for_agents, the default)",
        "/freshness",
        "freshness_required",
    ),
    "client_message_id_required": _invalid(
        "a send without client_message_id (or an empty one)",
        "/client_message_id",
        "client_message_id_required",
    ),
    "target_key_mismatch": _invalid(
        "a freshness.target_key that is not the key of the target",
        "/freshness/target_key",
        "target_key_mismatch",
    ),
    "patch_target_missing": _invalid(
        "an operation naming a message that is no follow-up of the run",
        "/ops/0/path",
        "patch_target_missing",
    ),
    "unauthenticated": _refused("missing, unknown or revoked token", "unauthenticated", 401),
    "level_insufficient": _refused(
        "read, but not the level the action needs", "forbidden", 403, "level_insufficient"
    ),
    "owner_required": _refused(
        "an administrative route called by someone other than the owner",
        "forbidden",
        403,
        "owner_required",
    ),
    "agents_only": _refused(
        "a route of the agent runtime called by a person", "forbidden", 403, "agents_only"
    ),
    "not_run_agent": _refused(
        "a reader of the run who is not its agent", "forbidden", 403, "not_run_agent"
    ),
    "channel_archived": _refused(
        "an archived channel (read-only for everyone)",
        "channel_read_only",
        403,
        "channel_archived",
    ),
    "token_malformed": _refused(
        "an invocation token this server did not sign",
        "invocation_token_invalid",
        403,
        "malformed",
    ),
    "token_expired": _refused(
        "an invocation token past its lifetime", "invocation_token_invalid", 403, "expired"
    ),
    "token_run_mismatch": _refused(
        "an invocation token of another run (or of another delivery kind)",
        "invocation_token_invalid",
        403,
        "run_mismatch",
    ),
    "token_superseded": _refused(
        "an invocation token older than the latest delivery, or used before",
        "invocation_token_invalid",
        403,
        "superseded",
    ),
    "not_found": _refused("unknown, or not readable by the caller", "not_found", 404),
    "request_timeout": _refused("a body slower than http.body_timeout", "request_timeout", 408),
    "run_not_active": _refused("the run has ended", "conflict", 409, "run_not_active"),
    "idempotency_conflict": _refused(
        "a client id used before with another payload", "idempotency_conflict", 409
    ),
    "invalid_state_transition": _refused(
        "a move the run's state (or a follow-up's) does not allow",
        "invalid_state_transition",
        409,
    ),
    "base_version_conflict": ProblemExample(
        "a base_version that is not the run's version: current is the run now",
        ProblemAnswer(
            code="base_version_conflict",
            status=409,
            current=run_document(
                RunView(
                    run=_example_run(),
                    followups={_EXAMPLE_FOLLOWUP: FollowupState.DELIVERED.value},
                )
            ),
        ),
    ),
    "payload_too_large": _refused("a body beyond http.max_body_bytes", "payload_too_large", 413),
    "unsupported_media_type": _refused(
        "a body sent as text/plain (or any media type but JSON)", "unsupported_media_type", 415
    ),
    "message_rate_limited": _refused("the rl.message bucket is empty", "rate_limited", 429),
    "stream_limit": _refused(
        "the caller holds stream.max_per_principal streams already", "rate_limited", 429
    ),
    "internal": _refused("an unexpected error (nothing of it is shown)", "internal", 500),
    "unavailable": _refused("the database is unreachable or too slow", "unavailable", 503),
}


def problem_description(status: int, answers: Iterable[ProblemAnswer]) -> str:
    """The description of a problem status: the codes of its examples, then what it means.

    Args:
        status: an HTTP status of `_NOTES`.
        answers: the problems the route documents with that status.

    Returns:
        For example ``forbidden (agents_only, level_insufficient), channel_read_only
        (channel_archived): the caller may not do this here; reason says why``.
    """
    details: dict[str, list[str]] = {}
    for answer in answers:
        shown = details.setdefault(answer.code, [])
        for detail in (answer.reason, *(error.code for error in answer.errors)):
            if detail and detail not in shown:
                shown.append(detail)
    codes = ", ".join(
        f"{code} ({', '.join(shown)})" if shown else code for code, shown in details.items()
    )
    return f"{codes}: {_NOTES[status]}"


def openapi_examples(names: Sequence[ProblemName]) -> list[Example]:
    """The OpenAPI examples of named problems, keyed by their names.

    Args:
        names: names of `PROBLEM_EXAMPLES`.

    Returns:
        One example per name, its value rendered by `problem_of`.
    """
    return [
        Example(
            id=name,
            summary=PROBLEM_EXAMPLES[name].summary,
            value=msgspec.to_builtins(
                problem_of(PROBLEM_EXAMPLES[name].answer, EXAMPLE_CORRELATION_ID)
            ),
        )
        for name in names
    ]


def problems(*names: ProblemName) -> dict[int, ResponseSpec]:
    """Response specs of the problem answers of a route: `COMMON` and its own.

    Args:
        names: the answers the route gives besides the common ones (the names of
            `PROBLEM_EXAMPLES`), for example ``"owner_required"``; their statuses are
            documented with them.

    Returns:
        Specs for Litestar's ``responses`` argument: per status its examples, and a
        description naming their codes (`problem_description`).
    """
    by_status: dict[int, list[ProblemName]] = {}
    for name in dict.fromkeys((*COMMON, *names)):
        by_status.setdefault(PROBLEM_EXAMPLES[name].answer.status, []).append(name)
    return {
        status: ResponseSpec(
            data_container=Problem,
            media_type=PROBLEM_MEDIA_TYPE,
            description=problem_description(
                status, (PROBLEM_EXAMPLES[name].answer for name in found)
            ),
            # Litestar would invent values ("status": 6165); these are real answers.
            generate_examples=False,
            examples=openapi_examples(found),
        )
        for status, found in sorted(by_status.items())
    }


__all__ = [
    "COMMON",
    "EXAMPLE_CORRELATION_ID",
    "PROBLEM_EXAMPLES",
    "ProblemExample",
    "ProblemName",
    "openapi_examples",
    "problem_description",
    "problems",
]
