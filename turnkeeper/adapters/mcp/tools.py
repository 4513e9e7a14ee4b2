"""The tools of ``turnkeeper mcp``: names, descriptions, JSON schemas and argument checks.

The descriptions are written for the model that calls the tools: what a tool does, when
to call it and what comes back. Each schema is the one source of its tool's rules:
`parse_arguments` checks the call's arguments against it (types, bounds, required and
unknown members) and names every offending member, so that the model can correct the
call. Nothing here imports the MCP SDK.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import attrs

from turnkeeper.application.settings import Settings
from turnkeeper.domain.text import is_blank


class ToolName(enum.StrEnum):
    """The tools, by the name the model calls them with."""

    SEND_MESSAGE = "send_message"
    READ_HISTORY = "read_history"
    WAIT_FOR_WORK = "wait_for_work"
    AWAIT_INPUT = "await_input"
    FINISH_RUN = "finish_run"


#: The end states `finish_run` accepts.
FINISH_STATES = ("completed", "failed", "cancelled")

#: What the server tells the host about itself (shown to the model by most hosts).
INSTRUCTIONS = (
    "turnkeeper keeps the turns of agents in conversation threads. Call wait_for_work to "
    "receive work; it starts the run it hands you. Read the thread with read_history "
    "before you answer with send_message. When send_message says that new messages "
    "arrived, read them and send again only if a reply is still needed. End every run "
    "with finish_run."
)

_TARGET = {
    "type": "string",
    "format": "uuid",
    "description": "The thread id, as wait_for_work or a previous read_history gave it.",
}
_RUN_ID = {
    "type": "string",
    "format": "uuid",
    "description": "The run id, as wait_for_work gave it.",
}


class ArgumentError(Exception):
    """The arguments of a call break its tool's schema; ``str()`` names every member.

    Args:
        problems: one phrase per offending member, for example ``"limit: must be an
            integer from 1 to 500"``.
    """

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = tuple(problems)


@attrs.frozen(kw_only=True)
class ToolSpec:
    """One tool as the server lists it.

    Attributes:
        name: what the model calls.
        title: a short name for people.
        description: what the tool does, for the model.
        input_schema: the JSON schema of its arguments.
        read_only: whether it changes nothing on the server.
    """

    name: ToolName
    title: str
    description: str
    input_schema: Mapping[str, Any]
    read_only: bool = False


def tool_specs(settings: Settings) -> tuple[ToolSpec, ...]:
    """The five tools, with the bounds of the given settings in their schemas.

    Args:
        settings: ``page.max_limit`` bounds ``read_history``'s limit,
            ``mcp.max_wait_seconds`` bounds ``wait_for_work``'s timeout.

    Returns:
        The tools in the order the server lists them.
    """
    max_wait = int(settings.mcp_max_wait.total_seconds())
    default_wait = int(min(settings.mcp_wait, settings.mcp_max_wait).total_seconds())
    return (
        ToolSpec(
            name=ToolName.WAIT_FOR_WORK,
            title="Wait for work",
            description=(
                "Wait until there is something for you to do: a person asked you to work "
                "in a thread (the run is started for you), a new message arrived for a "
                "run you are working on, or a person asked you to stop a run. The answer "
                "says what happened and what to do next, with the thread id (the target "
                "of read_history and send_message) and the run id (for await_input and "
                "finish_run). When nothing arrives in time, it says so: call it again to "
                "keep waiting."
            ),
            input_schema=_object(
                {
                    "timeout_seconds": {
                        "type": "integer",
                        "minimum": 0,
                        "maximum": max_wait,
                        "description": (
                            f"How long to wait at most, in seconds (default {default_wait}; "
                            "0 only looks)."
                        ),
                    }
                },
                required=(),
            ),
        ),
        ToolSpec(
            name=ToolName.READ_HISTORY,
            title="Read a thread",
            description=(
                "Read the messages of a thread that you may see, oldest first, each with "
                "its seq (its position in the thread) and its author. Call it before you "
                "answer and whenever send_message tells you that new messages arrived: "
                "send_message only posts once you have read what came before."
            ),
            input_schema=_object(
                {
                    "target": _TARGET,
                    "after_seq": {
                        "type": "integer",
                        "minimum": 0,
                        "description": (
                            "Only messages after this seq (default 0: from the start)."
                        ),
                    },
                    "limit": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": settings.page_max_limit,
                        "description": (
                            f"The most messages to return (default {settings.default_page_size})."
                        ),
                    },
                },
                required=("target",),
            ),
            read_only=True,
        ),
        ToolSpec(
            name=ToolName.SEND_MESSAGE,
            title="Post a message",
            description=(
                "Post a message to a thread, as yourself, for the run you are working on "
                "there. It is posted only if you have read every message that came before "
                "(read_history); otherwise nothing is posted and the answer tells you to "
                "read the new messages first, then send again only if a reply is still "
                "needed. Long content is posted in several parts; if new messages arrive "
                "between the parts, the rest waits and sending the same content again "
                "later posts only the missing parts."
            ),
            input_schema=_object(
                {
                    "target": _TARGET,
                    "content": {
                        "type": "string",
                        "minLength": 1,
                        "description": "The text to post (plain text or Markdown).",
                    },
                },
                required=("target", "content"),
            ),
        ),
        ToolSpec(
            name=ToolName.AWAIT_INPUT,
            title="Wait for a person's answer",
            description=(
                "Mark a run you are working on as waiting for a person's answer. Post your "
                "question in the thread with send_message first, so that people see it, "
                "then call this and then wait_for_work, which brings you the answer."
            ),
            input_schema=_object(
                {
                    "run_id": _RUN_ID,
                    "question": {
                        "type": "string",
                        "minLength": 1,
                        "description": "What you asked, in a few words.",
                    },
                },
                required=("run_id",),
            ),
        ),
        ToolSpec(
            name=ToolName.FINISH_RUN,
            title="Finish a run",
            description=(
                "End a run: completed when the work is done, failed when it cannot be "
                "done, cancelled when a person asked you to stop. Call it once you have "
                "posted your last message for the run."
            ),
            input_schema=_object(
                {
                    "run_id": _RUN_ID,
                    "state": {
                        "type": "string",
                        "enum": list(FINISH_STATES),
                        "description": "completed, failed or cancelled.",
                    },
                    "reason": {
                        "type": "string",
                        "minLength": 1,
                        "description": "Why, in a few words (for failed and cancelled).",
                    },
                },
                required=("run_id", "state"),
            ),
        ),
    )


@attrs.frozen(kw_only=True)
class SendArgs:
    """The arguments of ``send_message``."""

    target: str
    content: str = attrs.field(repr=False)


@attrs.frozen(kw_only=True)
class HistoryArgs:
    """The arguments of ``read_history``."""

    target: str
    after_seq: int = 0
    limit: int | None = None


@attrs.frozen(kw_only=True)
class WaitArgs:
    """The arguments of ``wait_for_work``, the default filled in."""

    timeout: timedelta


@attrs.frozen(kw_only=True)
class AwaitArgs:
    """The arguments of ``await_input``."""

    run_id: str
    question: str | None = None


@attrs.frozen(kw_only=True)
class FinishArgs:
    """The arguments of ``finish_run``."""

    run_id: str
    state: str
    reason: str | None = None


ToolArgs = SendArgs | HistoryArgs | WaitArgs | AwaitArgs | FinishArgs


def parse_arguments(spec: ToolSpec, arguments: Mapping[str, Any], settings: Settings) -> ToolArgs:
    """Check a call's arguments against its tool's schema and type them.

    Args:
        spec: the tool called.
        arguments: the call's arguments as the host sent them.
        settings: the default wait of ``wait_for_work``.

    Returns:
        The typed arguments of that tool.

    Raises:
        ArgumentError: naming every unknown, missing or invalid member.
    """
    values = _checked(spec.input_schema, arguments)
    match spec.name:
        case ToolName.SEND_MESSAGE:
            return SendArgs(target=values["target"], content=values["content"])
        case ToolName.READ_HISTORY:
            return HistoryArgs(
                target=values["target"],
                after_seq=values.get("after_seq", 0),
                limit=values.get("limit"),
            )
        case ToolName.WAIT_FOR_WORK:
            given = values.get("timeout_seconds")
            default = min(settings.mcp_wait, settings.mcp_max_wait)
            return WaitArgs(timeout=default if given is None else timedelta(seconds=given))
        case ToolName.AWAIT_INPUT:
            return AwaitArgs(run_id=values["run_id"], question=values.get("question"))
        case ToolName.FINISH_RUN:
            return FinishArgs(
                run_id=values["run_id"], state=values["state"], reason=values.get("reason")
            )


def _object(properties: Mapping[str, Any], *, required: tuple[str, ...]) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": dict(properties),
        "additionalProperties": False,
    }
    if required:
        schema["required"] = list(required)
    return schema


def _checked(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments, once every member passed its schema (the subset the tools use).

    Ids (``format: uuid``) come back in their canonical spelling: the session keys its
    runs and pending sends by the ids the server gives, which are canonical, so an id
    the model wrote in capitals, in braces, as ``urn:uuid:`` or without hyphens must
    find them too.
    """
    properties: Mapping[str, Mapping[str, Any]] = schema["properties"]
    problems = [
        f"{name}: not an argument of this tool" for name in arguments if name not in properties
    ]
    problems += [
        f"{name}: required" for name in schema.get("required", ()) if name not in arguments
    ]
    values = dict(arguments)
    for name, value in arguments.items():
        rule = properties.get(name)
        if rule is not None:
            problem = _member_problem(rule, value)
            if problem is not None:
                problems.append(f"{name}: {problem}")
            elif rule.get("format") == "uuid":
                values[name] = _canonical_uuid(value)
    if problems:
        raise ArgumentError(problems)
    return values


def _member_problem(rule: Mapping[str, Any], value: object) -> str | None:
    if rule["type"] == "integer":
        low, high = rule.get("minimum"), rule.get("maximum")
        bounds = f"from {low} to {high}" if high is not None else f"of {low} or more"
        if not isinstance(value, int) or isinstance(value, bool):
            return f"must be an integer {bounds}"
        if (low is not None and value < low) or (high is not None and value > high):
            return f"must be an integer {bounds}"
        return None
    if not isinstance(value, str):
        return "must be a string"
    if "enum" in rule and value not in rule["enum"]:
        return "must be one of " + ", ".join(rule["enum"])
    if len(value) < rule.get("minLength", 0) or (rule.get("minLength") and is_blank(value)):
        return "must not be empty"
    if rule.get("format") == "uuid" and _canonical_uuid(value) is None:
        return "must be an id (a UUID)"
    return None


def _canonical_uuid(value: str) -> str | None:
    """The canonical spelling of an id (lower case, hyphenated), None for no UUID."""
    try:
        return str(uuid.UUID(value))
    except ValueError:
        return None


__all__ = [
    "FINISH_STATES",
    "INSTRUCTIONS",
    "ArgumentError",
    "AwaitArgs",
    "FinishArgs",
    "HistoryArgs",
    "SendArgs",
    "ToolArgs",
    "ToolName",
    "ToolSpec",
    "WaitArgs",
    "parse_arguments",
    "tool_specs",
]
