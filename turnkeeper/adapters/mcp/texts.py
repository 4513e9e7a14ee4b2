"""What the tools of ``turnkeeper mcp`` answer, as text for the model.

Held and partial-held answers are guidance only (seed message-freshness-gate, section
6): they name the thread in words and say what to do, never a seq, a target key, a
client message id or a chunk. The other answers name what the model needs for its next
call (thread ids, run ids, message ids, seqs of read_history).
"""

from __future__ import annotations

from collections.abc import Sequence

from turnkeeper.adapters.client import ClientProblem, HistoryMessage, HistoryPage, Run
from turnkeeper.domain.logical_sends import AcceptedChunk

#: What to do next, by problem code (appended to the problem's title and code).
_HINTS = {
    "not_found": "The thread or run does not exist, or you may not read it.",
    "forbidden": "You have no right to do this there.",
    "channel_read_only": "The channel is archived: nothing can be posted there.",
    "unauthenticated": "The agent token of this tool server is not valid.",
    "invocation_token_invalid": "This delivery is no longer valid; call wait_for_work.",
    "invalid_state_transition": "The run is not in a state that allows this.",
    "idempotency_conflict": "A message with this id was posted before with other content.",
    "payload_too_large": "The content is too long.",
}


def thread_words(title: str | None) -> str:
    """A thread named in words: its title when it has one.

    Args:
        title: the thread's title, if any.

    Returns:
        For example ``the thread "Release plan"``, or ``this thread``.
    """
    return f'the thread "{title}"' if title else "this thread"


#: Where to read from after a hold, when this session has read the thread before: what
#: it read counts, so reading on from there ends the hold (a page read after a gap would
#: not, as nothing of it counts as read).
_READ_ON = "after the last message you read there in this session"


def held_text(thread: str, *, read_before: bool) -> str:
    """The guidance for a send that was held before any part was posted.

    Args:
        thread: the thread in words (`thread_words`).
        read_before: whether this session has read (or posted in) the thread before;
            if not, it must read the thread from its start.

    Returns:
        The instruction: read the new messages (from where this session read, or from
        the start), send again only if still needed.
    """
    if not read_before:
        return (
            f"Not sent: {thread} has messages you have not read in this session. Call "
            "read_history with the same target from its start, page by page as each "
            "answer says, then call send_message again only if a reply is still needed."
        )
    return (
        f"Not sent: new messages arrived in {thread} after the ones you have read. "
        f"Call read_history with the same target, {_READ_ON}, to read them, then call "
        "send_message again only if a reply is still needed."
    )


def partial_held_text(thread: str) -> str:
    """The guidance for a long send that stopped after some of its parts were posted.

    Args:
        thread: the thread in words (`thread_words`).

    Returns:
        The instruction: read, then resend the same content only if the rest is needed.
    """
    return (
        f"Only part of your message was posted to {thread}, as new messages arrived there "
        f"before the rest. Call read_history with the same target, {_READ_ON}, to read "
        "them. If the rest is still needed, call send_message again with the same "
        "content; the part already posted is not posted twice."
    )


def sent_text(thread_id: str, accepted: Sequence[AcceptedChunk]) -> str:
    """The confirmation of a send whose every part the server holds now.

    Args:
        thread_id: the target thread.
        accepted: the parts, in order (replays marked).

    Returns:
        Which messages hold the content, and which of them were posted before.
    """
    ids = ", ".join(chunk.message_id for chunk in accepted)
    replayed = sum(1 for chunk in accepted if chunk.replayed)
    if len(accepted) == 1:
        (only,) = accepted
        if only.replayed:
            return (
                f"Already sent before as message {only.message_id} in thread {thread_id}; "
                "nothing was posted again."
            )
        return f"Sent as message {only.message_id} (seq {only.accepted_seq}) in thread {thread_id}."
    if replayed == len(accepted):
        return f"Already sent before in {len(accepted)} parts ({ids}); nothing was posted again."
    if replayed:
        return (
            f"Sent the remaining {len(accepted) - replayed} of {len(accepted)} parts in thread "
            f"{thread_id}; the first {replayed} had been sent before (messages {ids})."
        )
    return f"Sent in {len(accepted)} parts in thread {thread_id} (messages {ids})."


def history_text(
    page: HistoryPage, *, after_seq: int, page_limit: int, gap_after: int | None = None
) -> str:
    """The messages of a read_history call, one block each.

    Args:
        page: the page the server answered.
        after_seq: the seq the call read after.
        page_limit: the page size asked for (or the default): a full page may have a
            successor.
        gap_after: when the page was read after a gap, the seq through which this
            session has read the thread (its observed frontier, below `after_seq`);
            None when the page joins what the session read.

    Returns:
        A header line, then per message its seq, author, time and content. A page after
        a gap says that it does not count as read and where to read from instead, and
        offers no next page (reading on would stay after the gap).
    """
    count = len(page.messages)
    noun = "message" if count == 1 else "messages"
    blocks = [_message_block(message) for message in page.messages]
    if gap_after is not None:
        header = (
            f"Thread {page.thread_id}: {count} {noun} after seq {after_seq} "
            f"(through seq {page.covers_through_seq}), not counted as read."
        )
        return "\n\n".join([header, _gap_text(gap_after), *blocks])
    lines = [
        f"Thread {page.thread_id}: {count} {noun} after seq {after_seq}, "
        f"read through seq {page.covers_through_seq}.",
        *blocks,
    ]
    if count >= page_limit:
        lines.append(
            f"There may be more: call read_history again with after_seq {page.covers_through_seq}."
        )
    return "\n\n".join(lines)


def _gap_text(read_through: int) -> str:
    """What a page read after a gap means, and where to read from instead."""
    read = (
        "has not read this thread before them (a new session has read nothing)"
        if read_through == 0
        else f"has read this thread only through seq {read_through}, not what came between"
    )
    return (
        f"These messages do not count as read in this session: this session {read}, and "
        "send_message posts only once nothing before your answer is unread. Before you "
        f"send here, call read_history with after_seq {read_through}, then again with the "
        "after_seq each answer names, until an answer names none."
    )


def _message_block(message: HistoryMessage) -> str:
    what = (
        message.author_kind if message.kind == "text" else f"{message.author_kind}, {message.kind}"
    )
    when = message.created_at.isoformat().replace("+00:00", "Z")
    head = f"[seq {message.thread_seq}] @{message.author_handle} ({what}) at {when}:"
    if message.kind == "run" and message.run_id is not None:
        # A run's anchor has no text of its own: say what it stands for.
        return f"{head}\n(run {message.run_id} began here)"
    return f"{head}\n{message.content or '(no text)'}"


def invocation_text(run: Run) -> str:
    """What to do with a run that wait_for_work just started.

    Args:
        run: the started run.

    Returns:
        The thread, the run and the steps of a turn.
    """
    return (
        f"You were asked to work in thread {run.thread_id}: run {run.id} is running "
        f"(message {run.triggering_message_id} asked for it). Call read_history with "
        f'target "{run.thread_id}" to read the thread, answer there with send_message, '
        f'then call finish_run with run_id "{run.id}" and state "completed" (or '
        "await_input if you need a person's answer first)."
    )


def followup_text(run: Run, message_id: str) -> str:
    """What to do with a new message for a run the session works on.

    Args:
        run: the run as it is now (resumed when it waited for input).
        message_id: the new message.

    Returns:
        Where to read it and that the run goes on.
    """
    return (
        f"A new message ({message_id}) arrived in thread {run.thread_id} for your run "
        f"{run.id}, which is {run.state.value.replace('_', ' ')}. Call read_history with "
        f'target "{run.thread_id}" to read it, then go on with the run and end it with '
        "finish_run."
    )


def cancel_text(run_id: str, thread_id: str | None) -> str:
    """What to do when a person asked to stop a run.

    Args:
        run_id: the run.
        thread_id: its thread, when known.

    Returns:
        The instruction to stop and finish the run as cancelled.
    """
    where = f" in thread {thread_id}" if thread_id else ""
    return (
        f"A person asked you to stop run {run_id}{where}. Stop working on it and call "
        f'finish_run with run_id "{run_id}" and state "cancelled".'
    )


def idle_text(seconds: int) -> str:
    """The answer of a wait_for_work call that saw nothing to do.

    Args:
        seconds: how long it waited.

    Returns:
        That nothing arrived, and to call again to keep waiting.
    """
    unit = "second" if seconds == 1 else "seconds"
    return f"No work arrived within {seconds} {unit}. Call wait_for_work again to keep waiting."


def awaiting_text(run: Run) -> str:
    """The confirmation of await_input.

    Args:
        run: the run, now waiting for input.

    Returns:
        That the run waits, and that wait_for_work brings the answer.
    """
    return (
        f"Run {run.id} now waits for a person's answer. Make sure your question is posted "
        "in the thread (send_message), then call wait_for_work to receive the answer."
    )


def finished_text(run: Run) -> str:
    """The confirmation of finish_run.

    Args:
        run: the ended run.

    Returns:
        Its end state.
    """
    return f"Run {run.id} ended: {run.state.value}."


def problem_text(problem: ClientProblem) -> str:
    """A problem answer of the server as the text of a tool error.

    Args:
        problem: the problem (its title, code, reason and offending members).

    Returns:
        The title and code, then the offending members and what to do; never a token,
        a stack trace or content.
    """
    title = problem.title or problem.code.replace("_", " ").capitalize()
    detail = f": {problem.reason}" if problem.reason else ""
    parts = [f"{title} ({problem.code}{detail})."]
    if problem.errors:
        members = ", ".join(f"{error.pointer} {error.code}" for error in problem.errors)
        parts.append(f"Offending members: {members}.")
    if problem.code == "rate_limited":
        wait = f"{problem.retry_after} seconds" if problem.retry_after else "a moment"
        parts.append(f"Wait {wait}, then try again.")
    elif problem.reason == "run_not_active":
        parts.append("The run has ended: send again to post the message outside it.")
    elif problem.code in _HINTS:
        parts.append(_HINTS[problem.code])
    return " ".join(parts)


def deferred_work_text(code: str, retry_after: int | None) -> str:
    """The tool error of wait_for_work when the server could not take work now.

    Args:
        code: the problem code (``rate_limited``, ``unavailable`` ...).
        retry_after: whole seconds to wait, when the server said.

    Returns:
        That nothing was lost, and when to call wait_for_work again.
    """
    wait = f"Wait {retry_after} seconds" if retry_after else "Wait a moment"
    return (
        f"The turnkeeper server could not take your work now ({code}). {wait}, then call "
        "wait_for_work again: the work stays and is handed to you then."
    )


#: The tool error when the turnkeeper server cannot be reached.
UNAVAILABLE_TEXT = (
    "The turnkeeper server could not be reached (unavailable). Try the same call again "
    "later; sending the same content again does not post it twice."
)
#: The tool error when the server's answer breaks the contract.
ANSWER_INVALID_TEXT = (
    "The turnkeeper server gave an answer this tool does not understand (answer_invalid)."
)
#: The tool error for anything unforeseen (details go to the log, never to the model).
INTERNAL_TEXT = "The tool failed unexpectedly (internal). Try again; if it persists, stop."

__all__ = [
    "ANSWER_INVALID_TEXT",
    "INTERNAL_TEXT",
    "UNAVAILABLE_TEXT",
    "awaiting_text",
    "cancel_text",
    "deferred_work_text",
    "finished_text",
    "followup_text",
    "held_text",
    "history_text",
    "idle_text",
    "invocation_text",
    "partial_held_text",
    "problem_text",
    "sent_text",
    "thread_words",
]
