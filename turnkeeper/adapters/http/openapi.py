"""OpenAPI helpers: the problem answers of each route, and what Litestar does not write.

`problems` documents the problem answers a route can give, once for every route;
`complete_document` adds to the generated document what the routes do but Litestar
leaves out (closed request bodies, paging bounds, links).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

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
    STATUS_BY_CODE,
    ProblemAnswer,
    problem_of,
)
from turnkeeper.adapters.http.requests import Body
from turnkeeper.application.settings import Settings

_DESCRIPTIONS: dict[int, str] = {
    400: "validation_failed (errors[] names the members)",
    401: "unauthenticated: missing or unknown bearer token",
    403: "forbidden, channel_read_only or invocation_token_invalid (reason says why)",
    404: "not_found: unknown, or not readable by the caller (identical answers)",
    405: "method_not_allowed",
    408: "request_timeout: the body did not arrive within http.body_timeout",
    409: "conflict, idempotency_conflict, invalid_state_transition or base_version_conflict",
    413: "payload_too_large: the body exceeds http.max_body_bytes",
    415: "unsupported_media_type: a body whose Content-Type is not JSON",
    429: "rate_limited: see Retry-After",
    500: "internal",
    503: (
        "unavailable: the database is unreachable or did not answer within "
        "database.request_timeout; see Retry-After"
    ),
}

#: Problems any authenticated route can answer (every one reads the database, so 503).
COMMON = (400, 401, 404, 413, 415, 500, 503)

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


def _field(pointer: str, code: str) -> FieldErrorOut:
    return FieldErrorOut(pointer=pointer, code=code)


#: Real problems per status, as `problem_of` renders them: (summary, problem). Each is an
#: answer the server gives (same status, code, title and reason), not invented values.
_EXAMPLES: dict[int, tuple[tuple[str, ProblemAnswer], ...]] = {
    400: (
        (
            "an unknown member",
            ProblemAnswer(
                code="validation_failed",
                status=400,
                errors=(_field("/origin", "unknown_member"),),
            ),
        ),
        (
            "a member that must not be blank",
            ProblemAnswer(
                code="validation_failed", status=400, errors=(_field("/content", "required"),)
            ),
        ),
    ),
    401: (
        ("missing, unknown or revoked token", ProblemAnswer(code="unauthenticated", status=401)),
    ),
    403: (
        (
            "read but not the level the action needs",
            ProblemAnswer(code="forbidden", status=403, reason="level_insufficient"),
        ),
        (
            "an administrative route called by someone other than the owner",
            ProblemAnswer(code="forbidden", status=403, reason="owner_required"),
        ),
        (
            "an archived channel",
            ProblemAnswer(code="channel_read_only", status=403, reason="channel_archived"),
        ),
        (
            "an invocation token older than the latest delivery",
            ProblemAnswer(code="invocation_token_invalid", status=403, reason="superseded"),
        ),
    ),
    404: (("unknown, or not readable by the caller", ProblemAnswer(code="not_found", status=404)),),
    405: (
        ("a method the route does not have", ProblemAnswer(code="method_not_allowed", status=405)),
    ),
    408: (
        (
            "a body slower than http.body_timeout",
            ProblemAnswer(code="request_timeout", status=408),
        ),
    ),
    409: (
        (
            "an answer naming a run that has ended",
            ProblemAnswer(code="conflict", status=409, reason="run_not_active"),
        ),
        (
            "a client id used before with another payload",
            ProblemAnswer(code="idempotency_conflict", status=409),
        ),
        (
            "a run transition its state does not allow",
            ProblemAnswer(code="invalid_state_transition", status=409),
        ),
    ),
    413: (
        (
            "a body beyond http.max_body_bytes",
            ProblemAnswer(code="payload_too_large", status=413),
        ),
    ),
    415: (
        (
            "a body sent as text/plain (or any media type but JSON)",
            ProblemAnswer(code="unsupported_media_type", status=415),
        ),
    ),
    429: (("the rl.message bucket is empty", ProblemAnswer(code="rate_limited", status=429)),),
    500: (
        (
            "an unexpected error (nothing of it is shown)",
            ProblemAnswer(code="internal", status=500),
        ),
    ),
    503: (
        (
            "the database cannot be reached",
            ProblemAnswer(code="unavailable", status=503, reason="database_unreachable"),
        ),
    ),
}


def _example_key(answer: ProblemAnswer) -> str:
    detail = answer.reason or (answer.errors[0].code if answer.errors else None)
    return f"{answer.code}_{detail}" if detail else answer.code


def problem_examples(status: int) -> list[Example]:
    """The OpenAPI examples of a problem status: real answers of this server.

    Args:
        status: an HTTP status of `STATUS_BY_CODE`.

    Returns:
        One example per problem of `_EXAMPLES` for that status.
    """
    return [
        Example(
            id=_example_key(answer),
            summary=summary,
            value=msgspec.to_builtins(problem_of(answer, EXAMPLE_CORRELATION_ID)),
        )
        for summary, answer in _EXAMPLES[status]
    ]


def problems(*statuses: int) -> dict[int, ResponseSpec]:
    """Response specs of problem answers.

    Args:
        statuses: HTTP statuses; `COMMON` is always included.

    Returns:
        Specs for Litestar's ``responses`` argument.
    """
    wanted = sorted({*COMMON, *statuses})
    assert all(status in STATUS_BY_CODE.values() for status in wanted)
    return {
        status: ResponseSpec(
            data_container=Problem,
            media_type=PROBLEM_MEDIA_TYPE,
            description=_DESCRIPTIONS[status],
            # Litestar would invent values ("status": 6165); these are real answers.
            generate_examples=False,
            examples=problem_examples(status),
        )
        for status in wanted
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
    responses["408"] = OpenAPIResponse(
        description=_DESCRIPTIONS[408],
        content={
            media: OpenAPIMediaType(
                schema=found.schema,
                examples={example.id or "": example for example in problem_examples(408)},
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
        schema.one_of, schema.type = None, kept[0].type


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


def _member_rules(schemas: Mapping[str, Schema | Reference]) -> None:
    for (name, member), rule in MEMBER_RULES.items():
        _member(schemas, name, member).description = rule
    freshness = schemas.get("SendFreshnessBody")
    if not isinstance(freshness, Schema):
        raise LookupError("the OpenAPI document has no schema SendFreshnessBody")
    freshness.required = sorted({*(freshness.required or ()), "target_key"})
    # Below 0 is the gate's own validation error (``negative``), not the decoder's.
    _member(schemas, "SendFreshnessBody", "seen_up_to_seq").minimum = 0
    kind = _member(schemas, "MessageCreate", "kind")
    kind.one_of, kind.type, kind.enum = None, OpenAPIType.STRING, list(SENDABLE_KINDS)


def complete_document(openapi: OpenAPI, settings: Settings) -> OpenAPI:
    """Add to the generated document what the routes do but Litestar does not write.

    - Every request body schema says ``additionalProperties: false``: an unknown member
      is refused with 400 ``unknown_member`` (API.md conventions); its integer bounds
      (a seq or version from 0 to 2**63 - 1) are written exactly.
    - The paging parameters state their bounds: ``after`` and ``after_seq`` at least 0,
      ``limit`` from 1 to ``page.max_limit``, ``wait`` from 0 to
      ``stream.max_wait_seconds`` (outside: 400 ``out_of_range``).
    - Every 429 and 503 answer documents its ``Retry-After`` header.
    - The problem examples (real answers, `problem_examples`) carry no ``id`` member.
    - The links between operations (`turnkeeper.adapters.http.openapi_links`).
    - The rules of `MEMBER_RULES` (``run_id``) and the one kind a client may send;
      ``freshness.target_key`` is required (without it: 400 ``target_key_required``).
    - Every answer documents ``X-Correlation-Id``; a run's 200 its ``ETag``, a replay's
      200 ``Idempotent-Replay``; a route with a body its 408 ``request_timeout``.
    - No parameter admits JSON null (Litestar writes one for an optional parameter).

    Args:
        openapi: the document Litestar generated; changed in place.
        settings: for ``page.max_limit``.

    Returns:
        The same document.

    Raises:
        LookupError: when a request body or a member of `MEMBER_RULES` has no schema in
            the document.
    """
    schemas = openapi.components.schemas or {}
    for kind in _request_bodies():
        schema = schemas.get(kind.__name__)
        if not isinstance(schema, Schema):
            raise LookupError(f"the OpenAPI document has no schema {kind.__name__}")
        schema.additional_properties = False
        _exact_integer_bounds(kind, schema)
    _member_rules(schemas)
    bounds = {
        "after": (0, None),
        "after_seq": (0, None),
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
    _drop_example_ids(openapi)
    return add_links(openapi)
