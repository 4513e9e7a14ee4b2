"""The tool handlers of ``turnkeeper mcp``: each tool call made into runtime client calls.

`ToolHandlers.call` checks a call's arguments, runs the tool for one `McpSession` and
answers a `ToolAnswer`: text for the model (`turnkeeper.adapters.mcp.texts`), an error
flag, and for reads a structured copy. A server problem becomes a tool error with the
problem's title and code; an unforeseen failure becomes a generic tool error and one log
line with the exception's type only (never content, a token or a stack trace).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from http import HTTPStatus
from typing import Any

from turnkeeper.adapters.client import (
    AnswerInvalid,
    ClientProblem,
    ClientUnavailable,
    FollowupAck,
    HistoryPage,
    RunState,
)
from turnkeeper.adapters.mcp import texts
from turnkeeper.adapters.mcp.failures import (
    WorkDeferred,
    passing,
)
from turnkeeper.adapters.mcp.session import McpSession
from turnkeeper.adapters.mcp.tools import (
    ArgumentError,
    AwaitArgs,
    FinishArgs,
    HistoryArgs,
    SendArgs,
    ToolArgs,
    ToolSpec,
    WaitArgs,
    parse_arguments,
    tool_specs,
)
from turnkeeper.adapters.mcp.work import LOGGER_NAME, ToolAnswer, WorkWaiter
from turnkeeper.application.logs import get_logger
from turnkeeper.application.settings import Settings
from turnkeeper.domain.logical_sends import LogicalSendState

#: The problem that ends a logical send for good: a part of its id holds other content.
IDEMPOTENCY_CONFLICT = "idempotency_conflict"


def _log() -> Any:
    return get_logger(LOGGER_NAME)


class ToolHandlers:
    """The five tools over the runtime client of each session.

    Args:
        settings: ``mcp.*`` (chunk size, waits), ``page.*`` (read_history bounds) and
            ``stream.max_wait_seconds`` (the longest single long-poll).
        monotonic: the time source of wait_for_work's deadline.
    """

    def __init__(
        self, settings: Settings, *, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self._settings = settings
        self._waiter = WorkWaiter(settings, monotonic=monotonic)
        self._specs = {str(spec.name): spec for spec in tool_specs(settings)}

    @property
    def specs(self) -> tuple[ToolSpec, ...]:
        """The tools, as the server lists them."""
        return tuple(self._specs.values())

    async def call(
        self, session: McpSession, name: str, arguments: Mapping[str, Any]
    ) -> ToolAnswer:
        """Run one tool call for a session.

        Args:
            session: the calling session's state.
            name: the tool's name.
            arguments: the call's arguments as the host sent them.

        Returns:
            The answer; a tool error for an unknown tool, bad arguments, a problem of
            the server, an unreachable server or an unforeseen failure.
        """
        spec = self._specs.get(name)
        if spec is None:
            answer = ToolAnswer(
                text=f"There is no tool {name!r}; the tools are {', '.join(self._specs)}.",
                is_error=True,
                outcome="unknown_tool",
            )
        else:
            answer = await self._guarded(session, spec, arguments)
        _log().info("mcp_tool", tool=name, outcome=answer.outcome, is_error=answer.is_error)
        return answer

    async def _guarded(
        self, session: McpSession, spec: ToolSpec, arguments: Mapping[str, Any]
    ) -> ToolAnswer:
        try:
            return await self._run(session, parse_arguments(spec, arguments, self._settings))
        except ArgumentError as exc:
            return ToolAnswer(
                text=f"Invalid arguments ({exc}).", is_error=True, outcome="invalid_arguments"
            )
        except WorkDeferred as deferred:
            return ToolAnswer(
                text=texts.deferred_work_text(deferred.code, deferred.retry_after),
                is_error=True,
                outcome=deferred.code,
            )
        except ClientProblem as problem:
            return ToolAnswer(text=texts.problem_text(problem), is_error=True, outcome=problem.code)
        except ClientUnavailable:
            return ToolAnswer(text=texts.UNAVAILABLE_TEXT, is_error=True, outcome="unavailable")
        except AnswerInvalid:
            return ToolAnswer(
                text=texts.ANSWER_INVALID_TEXT, is_error=True, outcome="answer_invalid"
            )
        except Exception as exc:  # the model gets no detail; the log gets the type only
            _log().error("mcp_tool_failed", tool=str(spec.name), error=type(exc).__name__)
            return ToolAnswer(text=texts.INTERNAL_TEXT, is_error=True, outcome="internal")

    async def _run(self, session: McpSession, args: ToolArgs) -> ToolAnswer:
        match args:
            case SendArgs():
                return await self._send(session, args)
            case HistoryArgs():
                return await self._read(session, args)
            case WaitArgs():
                return await self._waiter.wait(session, args)
            case AwaitArgs():
                await self._absorb(session, args.run_id)
                try:
                    run = await session.client.await_input(args.run_id, args.question)
                except ClientProblem as problem:
                    if problem.status != HTTPStatus.CONFLICT:
                        raise
                    # A retry of a call whose answer was lost (the model is told to try
                    # again): the run waits as asked. Only its agent can make it wait.
                    run = await session.client.get_run(args.run_id)
                    if run.state is not RunState.WAITING_INPUT:
                        raise problem from None
                return ToolAnswer(text=texts.awaiting_text(run), outcome=run.state.value)
            case FinishArgs():
                # Before the finish: the end of the run defers every follow-up that is
                # only delivered, and opens a follow-on run for what the model answered.
                await self._absorb(session, args.run_id)
                run = await session.client.finish(args.run_id, args.state, args.reason)
                session.drop_run(run.id)
                return ToolAnswer(text=texts.finished_text(run), outcome=run.state.value)

    # -- send_message -------------------------------------------------------------------

    async def _send(self, session: McpSession, args: SendArgs) -> ToolAnswer:
        async with session.lock:
            logical_id = session.logical_id_for(args.target, args.content)
            run_id = session.runs.get(args.target)
            # Kept before the request: whatever ends this call before an answer (a
            # problem, an unreachable server, a cancelled tool call, a failure) leaves
            # parts possibly stored, and a resend of the same content must reuse the id
            # so that the server replays them instead of posting them twice.
            session.keep_pending(args.target, logical_id, args.content)
            try:
                result = await session.client.send_logical(
                    args.target,
                    logical_id,
                    args.content,
                    self._settings.mcp_chunk_bytes,
                    run_id=run_id,
                )
            except ClientProblem as problem:
                if problem.code == IDEMPOTENCY_CONFLICT:
                    # A part of this id holds other content: the id can never complete
                    # this send, so a resend starts a new one.
                    session.forget_pending(args.target, args.content)
                if run_id is not None and problem.reason == "run_not_active":
                    # The run ended: the next send posts outside it.
                    session.drop_run(run_id)
                raise
            if result.state in (LogicalSendState.SENT, LogicalSendState.ALREADY_SENT):
                session.forget_pending(args.target, args.content)
                if run_id is not None:
                    await self._absorb_after_send(session, run_id)
                return ToolAnswer(
                    text=texts.sent_text(args.target, result.accepted),
                    outcome=result.state.value,
                )
        thread = texts.thread_words(await session.thread_title(args.target))
        # Nothing read (or posted) there in this session: reading "after the last message
        # read" would mean after whatever page the model saw last, maybe one after a gap.
        read_before = session.freshness.frontier(result.target_key).observed_seq > 0
        guidance = (
            texts.partial_held_text(thread)
            if result.state is LogicalSendState.PARTIAL_HELD
            else texts.held_text(thread, read_before=read_before)
        )
        # Text only: a held result carries no structured state (seed section 6).
        return ToolAnswer(text=guidance, outcome=result.state.value)

    async def _absorb_after_send(self, session: McpSession, run_id: str) -> None:
        """Absorb the run's handed follow-ups after a posted send; it stays posted.

        The send is done whatever happens here: a failure for now keeps the follow-ups
        for the model's next act in the run instead of turning the posted send into a
        tool error (whose resend would be a new message, its logical id forgotten).
        """
        try:
            await self._absorb(session, run_id)
        except (ClientProblem, ClientUnavailable) as exc:
            code = exc.code if isinstance(exc, ClientProblem) else "unavailable"
            _log().info("mcp_followup_absorb_deferred", run_id=run_id, code=code)

    async def _absorb(self, session: McpSession, run_id: str) -> None:
        """Acknowledge ``absorbed`` the follow-ups handed to the model in a run.

        Called at the model's next act in that run (a posted send with its id,
        await_input, finish_run before the finish): the model has taken them into
        account, so the end of the run must not defer them into a follow-on run that
        asks the agent again. A refusal for good (the run ended: 409 run_not_active; the
        follow-up was discarded; the run is out of sight) leaves nothing to acknowledge
        and is logged as ``mcp_followup_ack_skipped``.

        Args:
            session: the calling session.
            run_id: the run of the act.

        Raises:
            ClientProblem: a failure that passes (429, 5xx); the follow-ups not yet
                absorbed stay for the next act.
            ClientUnavailable: the server was not reached; the same.
        """
        for message_id in session.handed_over(run_id):
            try:
                await session.client.patch_followups(
                    run_id, {message_id: FollowupAck.ABSORBED.value}
                )
            except ClientProblem as problem:
                if passing(problem):
                    raise
                _log().info("mcp_followup_ack_skipped", run_id=run_id, code=problem.code)
            session.forget_handed(run_id, message_id)

    # -- read_history -------------------------------------------------------------------

    async def _read(self, session: McpSession, args: HistoryArgs) -> ToolAnswer:
        async with session.lock:
            page = await session.client.read_history(args.target, args.after_seq, args.limit)
            # A page joined to what the session read moves its frontier to at least
            # after_seq; a page after a gap moves nothing (the gate's rule), so a frontier
            # still below after_seq tells the gap.
            read_through = session.freshness.frontier(page.target_key).observed_seq
        limit = args.limit if args.limit is not None else self._settings.default_page_size
        gap_after = read_through if args.after_seq > read_through else None
        return ToolAnswer(
            text=texts.history_text(
                page, after_seq=args.after_seq, page_limit=limit, gap_after=gap_after
            ),
            structured=_history_document(page),
            outcome=f"{len(page.messages)}_messages",
        )


def _history_document(page: HistoryPage) -> dict[str, Any]:
    messages = []
    for message in page.messages:
        document: dict[str, Any] = {
            "id": message.id,
            "seq": message.thread_seq,
            "author": {
                "id": message.author_id,
                "kind": message.author_kind,
                "handle": message.author_handle,
            },
            "origin": message.origin,
            "kind": message.kind,
            "content": message.content,
            "created_at": message.created_at.isoformat().replace("+00:00", "Z"),
        }
        if message.reply_to_id is not None:
            document["reply_to_id"] = message.reply_to_id
        if message.run_id is not None:
            document["run_id"] = message.run_id
        messages.append(document)
    return {
        "target": page.thread_id,
        "messages": messages,
        "covers_through_seq": page.covers_through_seq,
    }


__all__ = ["LOGGER_NAME", "ToolAnswer", "ToolHandlers", "WorkDeferred"]
