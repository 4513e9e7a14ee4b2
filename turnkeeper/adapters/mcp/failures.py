"""How the tool handlers of ``turnkeeper mcp`` read the server's refusals.

A refusal passes with time (429, 5xx, the server not reached) or holds for good (a
superseded invocation, a run out of sight). Work the server cannot take now stays
unacknowledged and becomes `WorkDeferred`, a tool error that says when to call
``wait_for_work`` again; work refused for good is acknowledged and skipped, so that it
does not stop every later event.
"""

from __future__ import annotations

from http import HTTPStatus

from turnkeeper.adapters.client import ClientProblem, ClientUnavailable


class WorkDeferred(Exception):
    """The server cannot take an agent event now (429, 5xx, unreachable).

    The event stays unacknowledged, so that the server delivers it again; the tool call
    becomes a tool error that says to call wait_for_work again.

    Args:
        code: the problem code, or ``unavailable`` when the server was not reached.
        retry_after: whole seconds to wait, when the server said.
    """

    def __init__(self, code: str, retry_after: int | None = None) -> None:
        super().__init__(code)
        self.code = code
        self.retry_after = retry_after


def passing(problem: ClientProblem) -> bool:
    """Whether a problem passes with time (rate limited, a server error).

    Args:
        problem: the server's answer.

    Returns:
        True for 429 and every 5xx.
    """
    return (
        problem.status == HTTPStatus.TOO_MANY_REQUESTS
        or problem.status >= HTTPStatus.INTERNAL_SERVER_ERROR
    )


def deferral(failure: ClientProblem | ClientUnavailable) -> WorkDeferred | None:
    """The `WorkDeferred` of a failure that passes with time, or None for one for good.

    Args:
        failure: a refusal of the server, or the server not reached.

    Returns:
        The deferral to raise (``unavailable`` when the server was not reached), or None.
    """
    if isinstance(failure, ClientUnavailable):
        return WorkDeferred("unavailable")
    if passing(failure):
        return WorkDeferred(failure.code, failure.retry_after)
    return None


def superseded(problem: ClientProblem) -> bool:
    """Whether starting an invocation was refused for good (the delivery is stale).

    Args:
        problem: the answer of the start.

    Returns:
        True for 403 ``invocation_token_invalid`` and 404.
    """
    if problem.status == HTTPStatus.FORBIDDEN:
        return problem.code == "invocation_token_invalid"
    return problem.status == HTTPStatus.NOT_FOUND


def out_of_reach(problem: ClientProblem) -> bool:
    """Whether a run refused a follow-up's handling for good (404 out of sight, 403).

    A run the agent can no longer read answers 404 on every delivery, and a resume with
    a superseded token or without the right answers 403 on every one: such an event is
    acknowledged and skipped, or it would stop every later event.

    Args:
        problem: the answer of the run call.

    Returns:
        True for 403 and 404.
    """
    return problem.status in (HTTPStatus.NOT_FOUND, HTTPStatus.FORBIDDEN)


__all__ = ["WorkDeferred", "deferral", "out_of_reach", "passing", "superseded"]
