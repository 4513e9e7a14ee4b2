"""What the published OpenAPI document adds to the one Litestar generates.

`complete_document` adds what the routes do but Litestar leaves out (closed request
bodies and their bounds, paging bounds, headers, links); the problem answers of each
route come from `turnkeeper.adapters.http.openapi_problems`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import cast

import msgspec
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
    RequestBody,
    Schema,
)

from turnkeeper.adapters.http.correlation import CORRELATION_HEADER
from turnkeeper.adapters.http.openapi_links import add_links
from turnkeeper.adapters.http.openapi_problems import (
    PROBLEM_EXAMPLES,
    ProblemName,
    openapi_examples,
    problem_description,
)
from turnkeeper.adapters.http.requests import Body, OptionalBody
from turnkeeper.application.settings import Settings
from turnkeeper.domain.events import MAX_SEQ

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
        description=problem_description(late.answer.status, [late.answer]),
        content={
            media: OpenAPIMediaType(
                schema=found.schema,
                examples={
                    example.id or "": example for example in openapi_examples(["request_timeout"])
                },
            )
            for media, found in model.content.items()
        },
    )


def _optional_body(operation: Operation, optional: set[str]) -> None:
    """Mark a body of optional members only as not required (no body reads as ``{}``)."""
    body = operation.request_body
    if not isinstance(body, RequestBody):
        return
    refs = {
        media.schema.ref for media in body.content.values() if isinstance(media.schema, Reference)
    }
    if refs and refs <= optional:
        body.required = False


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
        if sub is not OptionalBody:  # a base, which no route takes
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
                response.description = problem_description(
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
    ("MessageCreate", "mentions"): (
        "Principal ids, each once (uniqueItems). Ids are compared as UUIDs: one written in"
        " capitals or without hyphens is the same id, and a repeat of it is 400"
        " validation_failed, code duplicate at /mentions."
    ),
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
    # A repeated mention: 400 duplicate.
    _given(_member(schemas, "MessageCreate", "mentions")).unique_items = True
    # JSON Schema counts characters and cannot say "not blank": the bounds that hold of
    # every accepted content are stated, the rest is said.
    for name in ("MessageCreate", "AgentSendBody"):
        content = _member(schemas, name, "content")
        content.min_length = 1
        content.description = (
            "The text: not white space alone (Unicode's White_Space; 400 required), at most"
            f" {settings.max_content_bytes} UTF-8 bytes (message.max_content_bytes; 400"
            " too_long), and without U+0000 or a lone surrogate (400 invalid_character)."
        )


def complete_document(openapi: OpenAPI, settings: Settings) -> OpenAPI:
    """Add to the generated document what the routes do but Litestar does not write.

    - Every request body schema says ``additionalProperties: false``: an unknown member
      is refused with 400 ``unknown_member`` (API.md conventions); its integer bounds
      (a seq or version from 0 to 2**63 - 1) are written exactly.
    - The paging parameters state their bounds: ``after`` and ``after_seq`` from 0 to
      2**63 - 1, ``limit`` from 1 to ``page.max_limit``, ``wait`` from 0 to
      ``stream.max_wait_seconds`` (outside: 400 ``out_of_range``); a filter by id is a
      UUID (``format: uuid``, otherwise 400 ``invalid``).
    - A body of optional members only (`OptionalBody`) is not required: a request
      without one reads as ``{}``.
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
        if issubclass(kind, OptionalBody):
            # Litestar writes the route's default struct itself, which only the served
            # encoding turns into ``{}``.
            schema.default = {}
        _exact_integer_bounds(kind, schema)
    _member_rules(schemas, settings)
    bounds = {
        "after": (0, MAX_SEQ),
        "after_seq": (0, MAX_SEQ),
        "limit": (1, settings.page_max_limit),
        "wait": (0, int(settings.stream_max_wait.total_seconds())),
    }
    optional = {f"#/components/schemas/{kind.__name__}" for kind in _request_bodies(OptionalBody)}
    for path, method, operation in _operations_at(openapi):
        _optional_body(operation, optional)
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
