"""OpenAPI helpers: the problem answers of each route, and what Litestar does not write.

`problems` documents the problem answers a route gives: the common ones of every route
and the route's own, named from the catalogue `PROBLEM_EXAMPLES`; `complete_document`
adds to the generated document what the routes do but Litestar leaves out (closed
request bodies and their bounds, paging bounds, links).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Literal, cast

import attrs
import msgspec
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import (
    Example,
    OpenAPI,
    OpenAPIHeader,
    OpenAPIMediaType,
    OpenAPIResponse,
    OpenAPIType,
    Operation,
    Parameter,
    Reference,
    Schema,
)

from turnkeeper.adapters.http.answers import FieldErrorOut, Problem
from turnkeeper.adapters.http.correlation import CORRELATION_HEADER
from turnkeeper.adapters.http.openapi_links import add_links
from turnkeeper.adapters.http.problems import (
    PROBLEM_MEDIA_TYPE,
    ProblemAnswer,
    problem_of,
)
from turnkeeper.adapters.http.requests import Body
from turnkeeper.application.services.runs.views import RunView, run_document
from turnkeeper.application.settings import Settings
from turnkeeper.domain.events import MAX_SEQ
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

#: Problem statuses whose answer carries ``Retry-After`` (whole seconds).
RETRY_AFTER_STATUSES = ("429", "503")

#: The example of a 503 answer in the document.
UNAVAILABLE_EXAMPLE = Example(
    summary="the database is down, frozen or too slow",
    value={
        "type": "urn:turnkeeper:problem:unavailable",
        "title": "Service unavailable",
        "status": 503,
        "code": "unavailable",
        "correlation_id": "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
    },
)

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


def _description(status: int, answers: Iterable[ProblemAnswer]) -> str:
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


def _openapi_examples(names: Sequence[ProblemName]) -> list[Example]:
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
        description naming their codes (`_description`).
    """
    by_status: dict[int, list[ProblemName]] = {}
    for name in dict.fromkeys((*COMMON, *names)):
        by_status.setdefault(PROBLEM_EXAMPLES[name].answer.status, []).append(name)
    return {
        status: ResponseSpec(
            data_container=Problem,
            media_type=PROBLEM_MEDIA_TYPE,
            description=_description(status, (PROBLEM_EXAMPLES[name].answer for name in found)),
            # Litestar would invent values ("status": 6165); these are real answers.
            generate_examples=False,
            examples=_openapi_examples(found),
        )
        for status, found in sorted(by_status.items())
    }


def _retry_after_headers(operation: Operation) -> None:
    for status in RETRY_AFTER_STATUSES:
        response = (operation.responses or {}).get(status)
        if isinstance(response, OpenAPIResponse):
            response.headers = {
                **(response.headers or {}),
                "Retry-After": OpenAPIHeader(
                    schema=Schema(type=OpenAPIType.INTEGER, minimum=1),
                    description="seconds after which the request may succeed",
                    required=True,
                ),
            }


#: The header every answer carries (API.md conventions).
_CORRELATION_HEADER = OpenAPIHeader(
    schema=Schema(type=OpenAPIType.STRING),
    description=(
        "the request's X-Correlation-Id when it is printable ASCII of 1 to 128 characters"
        " (spaces only inside), else a new id"
    ),
    required=True,
)
#: Answers with headers of their own: (path, method, status) -> headers.
_ANSWER_HEADERS: dict[tuple[str, str, str], dict[str, OpenAPIHeader]] = {
    ("/v1/runs/{run_id}", "get", "200"): {
        "ETag": OpenAPIHeader(
            schema=Schema(type=OpenAPIType.STRING),
            description='the run\'s version, quoted: "<version>"',
            required=True,
        )
    },
    **{
        (path, "post", "200"): {
            "Idempotent-Replay": OpenAPIHeader(
                schema=Schema(type=OpenAPIType.STRING, enum=["true"]),
                description="the answer replays an earlier identical request",
                required=True,
            )
        }
        for path in ("/v1/threads/{thread_id}/messages", "/v1/channels/{channel_id}/threads")
    },
}


def _answer_headers(path: str, method: str, operation: Operation) -> None:
    if operation.request_body is not None:
        _slow_body_answer(operation)
    for status, response in (operation.responses or {}).items():
        if isinstance(response, OpenAPIResponse):
            response.headers = {
                **(response.headers or {}),
                **_ANSWER_HEADERS.get((path, method, status), {}),
                CORRELATION_HEADER: _CORRELATION_HEADER,
            }


def _slow_body_answer(operation: Operation) -> None:
    """Document the 408 of a route with a body, shaped as its other problem answers."""
    responses = operation.responses or {}
    model = responses.get("413")
    if not isinstance(model, OpenAPIResponse) or not model.content:
        raise LookupError(f"{operation.operation_id} has a body but no 413 answer")
    late = PROBLEM_EXAMPLES["request_timeout"]
    responses["408"] = OpenAPIResponse(
        description=_description(late.answer.status, [late.answer]),
        content={
            media: OpenAPIMediaType(
                schema=found.schema,
                examples={
                    example.id or "": example for example in _openapi_examples(["request_timeout"])
                },
            )
            for media, found in model.content.items()
        },
    )


def _without_null(schema: Schema) -> None:
    """A query parameter's schema without Litestar's null alternative (no JSON there)."""
    kept = [
        s for s in schema.one_of or () if not (isinstance(s, Schema) and s.type == OpenAPIType.NULL)
    ]
    if schema.one_of and len(kept) == 1 and isinstance(kept[0], Schema):
        # Its format too: a filter by id is a UUID (400 ``invalid`` otherwise).
        schema.one_of, schema.type, schema.format = None, kept[0].type, kept[0].format


def _request_bodies(kind: type[Body] = Body) -> Iterator[type[Body]]:
    for sub in kind.__subclasses__():
        yield sub
        yield from _request_bodies(sub)


def _exact_integer_bounds(kind: type[Body], schema: Schema) -> None:
    # Litestar writes the bounds of an integer as floats, which rounds those beyond 2**53
    # (2**63 - 1 would read 2**63): write the integers msgspec checks.
    info = msgspec.inspect.type_info(kind)
    if not isinstance(info, msgspec.inspect.StructType):
        return
    for field in info.fields:
        bounds = field.type
        member = (schema.properties or {}).get(field.encode_name)
        if isinstance(bounds, msgspec.inspect.IntType) and isinstance(member, Schema):
            member.minimum = bounds.ge if bounds.ge is not None else member.minimum
            member.maximum = bounds.le if bounds.le is not None else member.maximum


def _operations_at(openapi: OpenAPI) -> Iterator[tuple[str, str, Operation]]:
    for path, item in (openapi.paths or {}).items():
        for method in ("get", "put", "post", "delete", "patch"):
            operation = getattr(item, method)
            if isinstance(operation, Operation):
                yield path, method, operation


def _operations(openapi: OpenAPI) -> Iterator[Operation]:
    for _path, _method, operation in _operations_at(openapi):
        yield operation


def _drop_unset_problems(openapi: OpenAPI, settings: Settings) -> None:
    """Leave out the problems the settings turn off (``freshness_required``)."""
    if settings.freshness_required_for_agents:
        return
    for operation in _operations(openapi):
        for response in (operation.responses or {}).values():
            if not isinstance(response, OpenAPIResponse):
                continue
            for media in (response.content or {}).values():
                examples = media.examples or {}
                if examples.pop("freshness_required", None) is None:
                    continue
                names = [name for name in examples if name in PROBLEM_EXAMPLES]
                response.description = _description(
                    PROBLEM_EXAMPLES["freshness_required"].answer.status,
                    (PROBLEM_EXAMPLES[cast(ProblemName, name)].answer for name in names),
                )


def _drop_example_ids(openapi: OpenAPI) -> None:
    # Litestar keys the examples by their id and writes the id into each example too,
    # where OpenAPI's Example Object has no such member: the key alone names it.
    for operation in _operations(openapi):
        for response in (operation.responses or {}).values():
            for media in (getattr(response, "content", None) or {}).values():
                for example in (media.examples or {}).values():
                    if isinstance(example, Example):
                        example.id = None


#: What the generated schemas cannot say of some members: (schema, member) -> description.
MEMBER_RULES: dict[tuple[str, str], str] = {
    ("MessageCreate", "run_id"): (
        "Agents only: an active run (queued, running or waiting_input) of the calling agent"
        " in this thread, which the message answers. Validated, not stored on the message"
        " and not part of the idempotency digest (a replay is unaffected). Any other run"
        " (unknown, of another thread or of another agent) or a person naming a run: 400"
        " validation_failed, code run_mismatch at /run_id (one uniform answer); the"
        " agent's own ended run: 409 conflict, reason run_not_active."
    ),
    ("MessageCreate", "kind"): (
        "Only text may be sent: system lines and run anchors come from the server alone"
        " (400 validation_failed at /kind)."
    ),
    ("Message", "run_id"): "Set only for kind run: the run whose live box this anchor holds.",
}
#: The kinds a client may send (`MessageCreate` keeps ``kind`` free text so that the
#: message rules answer the others with their own pointer and code).
SENDABLE_KINDS = ("text",)


def _member(schemas: Mapping[str, Schema | Reference], name: str, member: str) -> Schema:
    schema = schemas.get(name)
    found = (schema.properties or {}).get(member) if isinstance(schema, Schema) else None
    if not isinstance(found, Schema):
        raise LookupError(f"the OpenAPI document has no member {name}.{member}")
    return found


def _schema(schemas: Mapping[str, Schema | Reference], name: str) -> Schema:
    schema = schemas.get(name)
    if not isinstance(schema, Schema):
        raise LookupError(f"the OpenAPI document has no schema {name}")
    return schema


def _given(member: Schema) -> Schema:
    """The schema of a member's value: the one alternative Litestar writes for an optional one."""
    alternatives = member.one_of or ()
    if len(alternatives) == 1 and isinstance(alternatives[0], Schema):
        return alternatives[0]
    return member


def _require(schema: Schema, *members: str) -> None:
    schema.required = sorted({*(schema.required or ()), *members})


def _member_rules(schemas: Mapping[str, Schema | Reference], settings: Settings) -> None:
    for (name, member), rule in MEMBER_RULES.items():
        _member(schemas, name, member).description = rule
    # Members the use cases require with codes of their own (target_key_required,
    # client_message_id_required, freshness_required), which the structs leave optional.
    _require(_schema(schemas, "SendFreshnessBody"), "target_key")
    send = _schema(schemas, "AgentSendBody")
    _require(send, "client_message_id")
    if settings.freshness_required_for_agents:
        _require(send, "freshness")
    # Below 0 is the gate's own validation error (``negative``), not the decoder's.
    _member(schemas, "SendFreshnessBody", "seen_up_to_seq").minimum = 0
    # Empty: 400 required (client_message_id_required); longer: too_long. Both rules
    # count characters (code points), as JSON Schema does.
    for name, member in (
        ("MessageCreate", "client_msg_id"),
        ("AgentSendBody", "client_message_id"),
    ):
        client_id = _given(_member(schemas, name, member))
        client_id.min_length, client_id.max_length = 1, settings.max_client_id_length
    # An empty audience: 400 empty (absent means everyone who reads the thread).
    _given(_member(schemas, "MessageCreate", "restricted_to")).min_items = 1
    # More sources than the gate reads: 400 too_many.
    sources = _given(_member(schemas, "SendFreshnessBody", "source_message_ids"))
    sources.max_items = settings.max_source_message_ids
    kind = _member(schemas, "MessageCreate", "kind")
    kind.one_of, kind.type, kind.enum = None, OpenAPIType.STRING, list(SENDABLE_KINDS)


def complete_document(openapi: OpenAPI, settings: Settings) -> OpenAPI:
    """Add to the generated document what the routes do but Litestar does not write.

    - Every request body schema says ``additionalProperties: false``: an unknown member
      is refused with 400 ``unknown_member`` (API.md conventions); its integer bounds
      (a seq or version from 0 to 2**63 - 1) are written exactly.
    - The paging parameters state their bounds: ``after`` and ``after_seq`` from 0 to
      2**63 - 1, ``limit`` from 1 to ``page.max_limit``, ``wait`` from 0 to
      ``stream.max_wait_seconds`` (outside: 400 ``out_of_range``); a filter by id is a
      UUID (``format: uuid``, otherwise 400 ``invalid``).
    - Every 429 and 503 answer documents its ``Retry-After`` header.
    - The problem examples (real answers, `PROBLEM_EXAMPLES`) carry no ``id`` member,
      and none the settings turn off (``freshness_required`` while
      ``freshness.required_for_agents`` is false).
    - The links between operations (`turnkeeper.adapters.http.openapi_links`).
    - The rules of `MEMBER_RULES` (``run_id``) and the one kind a client may send;
      ``freshness.target_key`` and a send's ``client_message_id`` are required (without
      them: 400 ``target_key_required``, ``client_message_id_required``), and its
      ``freshness`` while ``freshness.required_for_agents`` (``freshness_required``); a
      client id is 1 to ``message.max_client_id_length`` characters (``required``,
      ``too_long``), an audience (``restricted_to``) not empty (``empty``), a send's
      ``freshness.source_message_ids`` at most ``freshness.max_source_message_ids``
      (``too_many``).
    - Every answer documents ``X-Correlation-Id``; a run's 200 its ``ETag``, a replay's
      200 ``Idempotent-Replay``; a route with a body its 408 ``request_timeout``.
    - No parameter admits JSON null (Litestar writes one for an optional parameter).

    Args:
        openapi: the document Litestar generated; changed in place.
        settings: for ``page.max_limit``, ``stream.max_wait_seconds``,
            ``message.max_client_id_length``, ``freshness.required_for_agents`` and
            ``freshness.max_source_message_ids``.

    Returns:
        The same document.

    Raises:
        LookupError: when a request body or a member of `MEMBER_RULES` has no schema in
            the document.
    """
    schemas = openapi.components.schemas or {}
    for kind in _request_bodies():
        schema = _schema(schemas, kind.__name__)
        schema.additional_properties = False
        _exact_integer_bounds(kind, schema)
    _member_rules(schemas, settings)
    bounds = {
        "after": (0, MAX_SEQ),
        "after_seq": (0, MAX_SEQ),
        "limit": (1, settings.page_max_limit),
        "wait": (0, int(settings.stream_max_wait.total_seconds())),
    }
    for path, method, operation in _operations_at(openapi):
        _retry_after_headers(operation)
        _answer_headers(path, method, operation)
        for parameter in operation.parameters or ():
            if isinstance(parameter, Parameter) and isinstance(parameter.schema, Schema):
                _without_null(parameter.schema)
            if isinstance(parameter, Parameter) and parameter.param_in == "query":
                found = bounds.get(parameter.name)
                if found is not None and isinstance(parameter.schema, Schema):
                    parameter.schema.minimum, parameter.schema.maximum = found
    _drop_unset_problems(openapi, settings)
    _drop_example_ids(openapi)
    return add_links(openapi)
