"""One freshness-gated send: the local check, the request, the answer applied to the frontier.

`SendGate.send_once` is the step that `AgentRuntimeClient.send` takes once and
`AgentRuntimeClient.send_logical` once per chunk; `StoredSends` remembers which client
message ids the server holds or may hold (an attempt without a clear answer), so that a
retry of a stored message (or chunk) is not held locally: the server answers it
already_sent. Every outcome is logged as one structured
line (frontiers and state, never content or token).
"""

from __future__ import annotations

from collections import OrderedDict
from http import HTTPStatus
from typing import Any

from turnkeeper.adapters.client import wire
from turnkeeper.adapters.client.errors import ClientProblem
from turnkeeper.adapters.client.models import Id, LogicalSendResult, SendResult
from turnkeeper.adapters.client.session import ApiSession
from turnkeeper.adapters.client.targets import TargetKeys
from turnkeeper.application.logs import get_logger
from turnkeeper.domain.freshness import SendState, SessionFreshnessState

#: The logger name of every record of this client.
LOGGER_NAME = "turnkeeper.client"
#: Stored client message ids (single sends and chunks) a client remembers; the least
#: recently used beyond are forgotten (a retry of a forgotten one is judged by the
#: frontiers alone again, so it may be held locally although the server holds it).
REMEMBERED_SENDS = 4096


def _log() -> Any:
    # A fresh proxy per record: it follows the structlog configuration of the moment
    # (a proxy cached on first use would keep the configuration it first saw).
    return get_logger(LOGGER_NAME)


class SendGate:
    """Posts messages through the freshness gate of the session's frontiers.

    Args:
        session: the agent's HTTP session.
        freshness: the session's frontiers, by target key.
        targets: the target keys of threads.
    """

    def __init__(
        self, session: ApiSession, freshness: SessionFreshnessState, targets: TargetKeys
    ) -> None:
        self._session = session
        self._freshness = freshness
        self._targets = targets
        self._stored = StoredSends()

    async def send_once(
        self,
        *,
        thread_id: str,
        target_key: str,
        content: str,
        client_message_id: str,
        seen_up_to_seq: int | None,
        run_id: Id | None,
        source_message_ids: tuple[str, ...],
    ) -> SendResult:
        """Check locally, post one message and apply the answer to the frontier.

        Args:
            thread_id: the target thread.
            target_key: its target key.
            content: the text (never logged).
            client_message_id: the idempotency key.
            seen_up_to_seq: the frontier to claim; the observed frontier when None.
            run_id: the run this answer belongs to, if any.
            source_message_ids: the messages the answer is based on; when empty, the
                message at the observed frontier, when known.

        A client message id an earlier answer of this session stored, or whose earlier
        attempt ended without a clear answer (`ClientUnavailable`, `AnswerInvalid`, a 5xx
        problem, a cancel), is never held locally: the server answers a stored one from
        its idempotency lookup, before any freshness check (already_sent), so a local
        hold would hide a stored message.

        Returns:
            sent, already_sent or held (`SendResult.held_locally` when no request was made).

        Raises:
            ClientProblem: on an error answer.
            ClientUnavailable: when the server cannot be reached.
            AnswerInvalid: when the answer breaks the contract.
        """
        local = self._freshness.check_send(target_key, seen_up_to_seq)
        if local.hold and not self._stored.known(target_key, client_message_id):
            result = SendResult(
                state=SendState.HELD,
                target_key=target_key,
                client_message_id=client_message_id,
                seen_up_to_seq=local.seen_up_to_seq,
                latest_seq=local.latest_known_seq,
                needs_refresh_until_seq=local.needs_refresh_until_seq,
                held_locally=True,
            )
            log_send(result)
            return result
        sources = source_message_ids
        if not sources:
            default_source = self._freshness.frontier(target_key).source_message_id
            sources = (default_source,) if default_source else ()
        freshness: dict[str, Any] = {
            "target_key": target_key,
            "seen_up_to_seq": local.seen_up_to_seq,
        }
        if sources:
            freshness["source_message_ids"] = list(sources)
        body: dict[str, Any] = {
            "target": thread_id,
            "content": content,
            "client_message_id": client_message_id,
            "freshness": freshness,
        }
        if run_id is not None:
            body["run_id"] = str(run_id)
        try:
            response = await self._session.request("POST", "/v1/agent/send", json=body)
            answer = wire.send_answer(
                response,
                target_key=target_key,
                client_message_id=client_message_id,
                seen_up_to_seq=local.seen_up_to_seq,
            )
        except ClientProblem as problem:
            if problem.status >= HTTPStatus.INTERNAL_SERVER_ERROR:
                # The server's unit may have committed before the error was answered.
                self._stored.remember(target_key, client_message_id)
            if problem.has_error("/freshness/target_key"):
                # The remembered key is stale: resolve it again on the next send.
                self._targets.forget(thread_id)
            _log().warning(
                "agent_send_failed",
                status=problem.status,
                code=problem.code,
                reason=problem.reason,
                target_key=target_key,
                client_message_id=client_message_id,
                seen_up_to_seq=local.seen_up_to_seq,
            )
            raise
        except BaseException:
            # No answer, a broken one, or a cancel: the outcome is unknown and the server
            # may hold the message; a local hold of the retry would report it not sent.
            self._stored.remember(target_key, client_message_id)
            raise
        state = SendState(answer.state)
        self._targets.remember(thread_id, answer.target_key)
        self._freshness.record_answer(
            answer.target_key,
            state,
            accepted_seq=answer.accepted_seq,
            latest_seq=answer.latest_seq,
            needs_refresh_until_seq=answer.needs_refresh_until_seq,
            message_id=answer.message_id,
        )
        if state is not SendState.HELD:
            self._stored.remember(answer.target_key, client_message_id)
        result = SendResult(
            state=state,
            target_key=answer.target_key,
            client_message_id=answer.client_message_id or client_message_id,
            seen_up_to_seq=local.seen_up_to_seq,
            latest_seq=answer.latest_seq,
            message_id=answer.message_id,
            accepted_seq=answer.accepted_seq,
            needs_refresh_until_seq=answer.needs_refresh_until_seq,
        )
        log_send(result)
        return result


class StoredSends:
    """The client message ids the server holds or may hold, by target key.

    Learnt from this client's own attempts: those answered sent or already_sent, and
    those that ended without a clear answer (the server may have stored them).

    Args:
        limit: how many client message ids to remember (least recently used forgotten).
    """

    def __init__(self, limit: int = REMEMBERED_SENDS) -> None:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self._limit = limit
        self._ids: OrderedDict[tuple[str, str], None] = OrderedDict()

    def known(self, target_key: str, client_message_id: str) -> bool:
        """Whether the server holds, or may hold, a client message id in a target.

        Args:
            target_key: the target's canonical key.
            client_message_id: the idempotency key.

        Returns:
            True when an attempt of this client stored it or may have (and it is not
            forgotten).
        """
        key = (target_key, client_message_id)
        if key not in self._ids:
            return False
        self._ids.move_to_end(key)
        return True

    def remember(self, target_key: str, client_message_id: str) -> None:
        """Record a client message id the server stored, or may have stored.

        Args:
            target_key: the target's canonical key.
            client_message_id: the idempotency key.
        """
        key = (target_key, client_message_id)
        self._ids[key] = None
        self._ids.move_to_end(key)
        while len(self._ids) > self._limit:
            self._ids.popitem(last=False)


def log_send(result: SendResult) -> None:
    """One structured line per send outcome: frontiers and state, never content.

    Args:
        result: the outcome.
    """
    _log().info(
        "agent_send",
        state=result.state.value,
        held_locally=result.held_locally,
        target_key=result.target_key,
        client_message_id=result.client_message_id,
        seen_up_to_seq=result.seen_up_to_seq,
        latest_seq=result.latest_seq,
        accepted_seq=result.accepted_seq,
        needs_refresh_until_seq=result.needs_refresh_until_seq,
    )


def log_logical_send(result: LogicalSendResult) -> None:
    """One structured line per logical send: chunk counts and frontiers, never content.

    Args:
        result: the outcome.
    """
    _log().info(
        "agent_logical_send",
        state=result.state.value,
        target_key=result.target_key,
        logical_id=result.logical_id,
        chunk_count=result.chunk_count,
        accepted_count=len(result.accepted),
        replayed_count=sum(1 for c in result.accepted if c.replayed),
        held_chunk_index=result.held_chunk_index,
        latest_seq=result.latest_seq,
    )
