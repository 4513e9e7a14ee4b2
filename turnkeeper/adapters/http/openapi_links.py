"""OpenAPI links of the published document: which answer feeds which operation.

Litestar generates no links, so `add_links` writes them into the generated document once
per application. The rule is systematic: every answer that carries the id of a space,
channel, thread, run, grant or principal links to every operation that takes that id
(`CONSUMERS`), with the runtime expression of the member that holds it
(``$response.body#/id``, ``$response.body#/thread/id``, ...). A few links also fill a
request body from several members of the answer (`BODY_LINKS`): an agent send with the
thread's ``target_key`` and ``latest_seq``, a run patch at the run's ``version``, the
start and resume of a run with the invocation token of the agent feed.

Links are looked up by method and path template, and written with the ``operationId``
Litestar generated for the target, so a renamed route fails at application start
instead of publishing a dangling link. Clients (and the schemathesis suite in
``tests/reliability/test_schemathesis.py``) follow them to chain requests.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs
from litestar.openapi.spec import Link, OpenAPI, OpenAPIResponse, Operation

#: A route of the document: lower-case method and path template.
Route = tuple[str, str]

_THREADS = "/v1/threads/{thread_id}"
_TOKENS = "/v1/principals/{principal_id}/tokens"
_CHANNELS = "/v1/channels/{channel_id}"
_RUNS = "/v1/runs/{run_id}"


@attrs.frozen
class Pointer:
    """A JSON pointer into the body of the answer a link starts from.

    Attributes:
        path: the pointer, relative to the answer's root (``/events/0/scope/thread_id``).
    """

    path: str

    def expression(self) -> str:
        """The OpenAPI runtime expression of the member."""
        return f"$response.body#{self.path}"


#: In a consumer's body template: the place of the id the link carries.
ID: Final = Pointer("")


@attrs.frozen(kw_only=True)
class Consumer:
    """An operation that takes one id, as a path parameter or inside its body.

    Attributes:
        route: the target operation.
        parameter: the path parameter that takes the id, or None.
        body: a request body template; `ID` marks where the id goes.
        description: what following the link does.
    """

    route: Route
    description: str
    parameter: str | None = None
    body: Mapping[str, Any] | None = None


@attrs.frozen(kw_only=True)
class LinkSpec:
    """A link that fills path parameters and a request body from several members.

    Attributes:
        route: the target operation.
        parameters: path parameter name -> member of the answer.
        body: a request body template whose `Pointer` leaves become runtime expressions.
        description: what following the link does.
    """

    route: Route
    description: str
    parameters: Mapping[str, Pointer] = attrs.field(factory=dict)
    body: Mapping[str, Any] | None = None


def _takes(parameter: str, route: Route, description: str) -> Consumer:
    return Consumer(route=route, parameter=parameter, description=description)


def _grant(member: str, description: str, **fixed: str) -> Consumer:
    return Consumer(
        route=("post", "/v1/grants"), body={**fixed, member: ID}, description=description
    )


#: Id kind -> link name -> the operation that takes such an id.
CONSUMERS: Final[Mapping[str, Mapping[str, Consumer]]] = {
    "space": {
        "createChannel": _takes(
            "space_id", ("post", "/v1/spaces/{space_id}/channels"), "Create a channel in the space."
        ),
        "grantOnSpace": _grant("resource_id", "Grant a level on the space.", resource_kind="space"),
    },
    "channel": {
        "createThread": _takes(
            "channel_id", ("post", f"{_CHANNELS}/threads"), "Start a thread in the channel."
        ),
        "setBehavior": _takes(
            "channel_id", ("put", f"{_CHANNELS}/behavior"), "Change the channel's switches."
        ),
        "setOperator": _takes(
            "channel_id", ("put", f"{_CHANNELS}/operator"), "Change the channel's operator."
        ),
        "archiveChannel": _takes(
            "channel_id", ("post", f"{_CHANNELS}/archive"), "Make the channel read-only."
        ),
        "grantOnChannel": _grant(
            "resource_id", "Grant a level on the channel.", resource_kind="channel"
        ),
    },
    "thread": {
        "getThread": _takes("thread_id", ("get", _THREADS), "Read the thread."),
        "listMessages": _takes(
            "thread_id", ("get", f"{_THREADS}/messages"), "Read the thread's history."
        ),
        "createMessage": _takes(
            "thread_id", ("post", f"{_THREADS}/messages"), "Write into the thread."
        ),
        "closeThread": _takes("thread_id", ("post", f"{_THREADS}/close"), "Close the thread."),
    },
    "run": {
        "getRun": _takes("run_id", ("get", _RUNS), "Read the run."),
        "cancelRun": _takes("run_id", ("post", f"{_RUNS}/cancel"), "Cancel the run."),
        "awaitInput": _takes(
            "run_id", ("post", f"{_RUNS}/await-input"), "Wait for input (the run's agent)."
        ),
        "finishRun": _takes("run_id", ("post", f"{_RUNS}/finish"), "End the run (its agent)."),
        "patchRun": _takes(
            "run_id", ("patch", _RUNS), "Acknowledge follow-ups of the run (its agent)."
        ),
    },
    "grant": {
        "deleteGrant": _takes("grant_id", ("delete", "/v1/grants/{grant_id}"), "Revoke the grant."),
    },
    "principal": {
        "setAgentConfig": _takes(
            "agent_id", ("put", "/v1/agents/{agent_id}/config"), "Configure the agent."
        ),
        "grantToPrincipal": _grant("principal_id", "Grant the principal a level."),
        "issueToken": _takes("principal_id", ("post", _TOKENS), "Issue the principal a token."),
        "listTokens": _takes("principal_id", ("get", _TOKENS), "List the principal's tokens."),
    },
}

_CHANNEL_IDS = {"channel": "/id", "space": "/space_id", "thread": "/main_thread_id"}
_THREAD_IDS = {"thread": "/id", "channel": "/channel_id"}
_CREATED_THREAD_IDS = {"thread": "/thread/id", "channel": "/thread/channel_id"}
_RUN_IDS = {"run": "/id", "thread": "/thread_id"}
_EVENT_SCOPE = "/events/0/scope"
_AGENT_EVENT = "/events/0"

#: Answer (route and status) -> id kind -> the member that holds such an id.
CARRIERS: Final[Mapping[tuple[str, str, str], Mapping[str, str]]] = {
    ("post", "/v1/principals", "201"): {"principal": "/id"},
    ("put", "/v1/agents/{agent_id}/config", "200"): {"principal": "/id"},
    ("get", "/v1/me", "200"): {"principal": "/id"},
    ("post", "/v1/spaces", "201"): {"space": "/id"},
    ("post", "/v1/spaces/{space_id}/channels", "201"): _CHANNEL_IDS,
    ("put", f"{_CHANNELS}/behavior", "200"): _CHANNEL_IDS,
    ("put", f"{_CHANNELS}/operator", "200"): _CHANNEL_IDS,
    ("post", f"{_CHANNELS}/archive", "200"): _CHANNEL_IDS,
    ("post", "/v1/grants", "201"): {"grant": "/id", "principal": "/principal_id"},
    ("post", "/v1/grants", "200"): {"grant": "/id", "principal": "/principal_id"},
    ("get", "/v1/grants", "200"): {
        "grant": "/grants/0/id",
        "principal": "/grants/0/principal_id",
    },
    ("post", _TOKENS, "201"): {"principal": "/principal_id"},
    ("post", f"{_CHANNELS}/threads", "201"): _CREATED_THREAD_IDS,
    ("post", f"{_CHANNELS}/threads", "200"): _CREATED_THREAD_IDS,
    ("get", _THREADS, "200"): _THREAD_IDS,
    ("post", f"{_THREADS}/close", "200"): _THREAD_IDS,
    ("post", f"{_THREADS}/messages", "201"): {"thread": "/thread_id"},
    ("post", f"{_THREADS}/messages", "200"): {"thread": "/thread_id"},
    ("get", "/v1/events", "200"): {
        "space": f"{_EVENT_SCOPE}/space_id",
        "channel": f"{_EVENT_SCOPE}/channel_id",
        "thread": f"{_EVENT_SCOPE}/thread_id",
    },
    ("get", _RUNS, "200"): _RUN_IDS,
    ("patch", _RUNS, "200"): _RUN_IDS,
    ("post", f"{_RUNS}/cancel", "200"): _RUN_IDS,
    ("post", f"{_RUNS}/start", "200"): _RUN_IDS,
    ("post", f"{_RUNS}/await-input", "200"): _RUN_IDS,
    ("post", f"{_RUNS}/resume", "200"): _RUN_IDS,
    ("post", f"{_RUNS}/finish", "200"): _RUN_IDS,
    ("get", "/v1/agent/events", "200"): {
        "run": f"{_AGENT_EVENT}/payload/run_id",
        "thread": f"{_AGENT_EVENT}/payload/thread_id",
    },
}


def _send_into_thread(at: str) -> LinkSpec:
    return LinkSpec(
        route=("post", "/v1/agent/send"),
        body={
            "target": Pointer(f"{at}/id"),
            "freshness": {
                "target_key": Pointer(f"{at}/target_key"),
                "seen_up_to_seq": Pointer(f"{at}/latest_seq"),
            },
        },
        description="Send into the thread as an agent, fresh as of this answer.",
    )


def _run_links() -> dict[str, LinkSpec]:
    return {
        "patchRun": LinkSpec(
            route=("patch", _RUNS),
            parameters={"run_id": Pointer("/id")},
            body={"base_version": Pointer("/version")},
            description="Acknowledge follow-ups of the run at its current version (its agent).",
        ),
        "answerRun": LinkSpec(
            route=("post", f"{_THREADS}/messages"),
            parameters={"thread_id": Pointer("/thread_id")},
            body={"run_id": Pointer("/id")},
            description="Answer in the run's thread as its agent, naming the run.",
        ),
        "sendRunAnswer": LinkSpec(
            route=("post", "/v1/agent/send"),
            body={"target": Pointer("/thread_id"), "run_id": Pointer("/id")},
            description="Send the run's answer through the freshness gate (its agent).",
        ),
    }


def _revoke_token(at: str) -> LinkSpec:
    return LinkSpec(
        route=("delete", f"{_TOKENS}/{{token_id}}"),
        parameters={"principal_id": Pointer(f"{at}/principal_id"), "token_id": Pointer(f"{at}/id")},
        description="Revoke the token (every server refuses it at once).",
    )


def _token_link(route: Route, description: str) -> LinkSpec:
    return LinkSpec(
        route=route,
        parameters={"run_id": Pointer(f"{_AGENT_EVENT}/payload/run_id")},
        body={"invocation_token": Pointer(f"{_AGENT_EVENT}/invocation_token")},
        description=description,
    )


#: Answer -> link name -> a link that fills a body from several members (it replaces a
#: consumer link of the same name).
BODY_LINKS: Final[Mapping[tuple[str, str, str], Mapping[str, LinkSpec]]] = {
    ("get", _THREADS, "200"): {"sendIntoThread": _send_into_thread("")},
    ("post", f"{_THREADS}/close", "200"): {"sendIntoThread": _send_into_thread("")},
    ("post", f"{_CHANNELS}/threads", "201"): {"sendIntoThread": _send_into_thread("/thread")},
    ("post", f"{_CHANNELS}/threads", "200"): {"sendIntoThread": _send_into_thread("/thread")},
    **{
        answer: _run_links()
        for answer, carried in CARRIERS.items()
        if answer[1].startswith(_RUNS) and "run" in carried
    },
    ("post", _TOKENS, "201"): {"revokeToken": _revoke_token("")},
    ("get", _TOKENS, "200"): {"revokeToken": _revoke_token("/tokens/0")},
    ("get", "/v1/agent/events", "200"): {
        "startRun": _token_link(
            ("post", f"{_RUNS}/start"), "Start the invoked run with the delivery's token."
        ),
        "resumeRun": _token_link(
            ("post", f"{_RUNS}/resume"), "Resume the waiting run with the delivery's token."
        ),
        "ackEvents": LinkSpec(
            route=("post", "/v1/agent/events/ack"),
            body={"through_seq": Pointer("/next_after")},
            description="Acknowledge the page.",
        ),
    },
}


def _carrying(value: Any, carried: Pointer) -> Any:
    """A body template with `ID` replaced by the member that holds the id."""
    if value == ID:
        return carried
    if isinstance(value, Mapping):
        return {key: _carrying(member, carried) for key, member in value.items()}
    return value


def _expressions(value: Any) -> Any:
    """A body template with every pointer written as a runtime expression."""
    if isinstance(value, Pointer):
        return value.expression()
    if isinstance(value, Mapping):
        return {key: _expressions(member) for key, member in value.items()}
    return value


def links_of(answer: tuple[str, str, str]) -> dict[str, LinkSpec]:
    """Every link of one answer, before operation ids are resolved.

    Args:
        answer: method, path template and status of the answer.

    Returns:
        Link name -> link (consumer links of every carried id, then the body links).
    """
    found: dict[str, LinkSpec] = {}
    for kind, member in CARRIERS.get(answer, {}).items():
        carried = Pointer(member)
        for name, consumer in CONSUMERS[kind].items():
            found[name] = LinkSpec(
                route=consumer.route,
                parameters={consumer.parameter: carried} if consumer.parameter else {},
                body=_carrying(consumer.body, carried) if consumer.body else None,
                description=consumer.description,
            )
    found.update(BODY_LINKS.get(answer, {}))
    return found


def _operation(openapi: OpenAPI, route: Route) -> Operation:
    method, path = route
    item = (openapi.paths or {}).get(path)
    operation = getattr(item, method, None) if item is not None else None
    if not isinstance(operation, Operation) or not operation.operation_id:
        raise LookupError(f"the OpenAPI document has no operation {method.upper()} {path}")
    return operation


def add_links(openapi: OpenAPI) -> OpenAPI:
    """Write every link into the generated document (idempotent).

    Args:
        openapi: the document Litestar generated for the application.

    Returns:
        The same document.

    Raises:
        LookupError: when a link names a route or status the document does not have.
    """
    answers = {*CARRIERS, *BODY_LINKS}
    for answer in sorted(answers):
        method, path, status = answer
        response = (_operation(openapi, (method, path)).responses or {}).get(status)
        if not isinstance(response, OpenAPIResponse):
            raise LookupError(f"{method.upper()} {path} documents no {status} answer")
        links: dict[str, Any] = dict(response.links or {})
        for name, link in links_of(answer).items():
            links[name] = Link(
                operation_id=_operation(openapi, link.route).operation_id,
                parameters={k: v.expression() for k, v in link.parameters.items()} or None,
                request_body=_expressions(link.body) if link.body is not None else None,
                description=link.description,
            )
        response.links = links
    return openapi
