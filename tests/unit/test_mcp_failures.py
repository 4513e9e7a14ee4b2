"""How the MCP tool handlers read the server's refusals: for now, or for good."""

from __future__ import annotations

import pytest

from turnkeeper.adapters.client import ClientProblem, ClientUnavailable
from turnkeeper.adapters.mcp.failures import deferral, out_of_reach, superseded

DEFERRAL_CASES = [
    ("rate-limited", ClientProblem(429, "rate_limited", retry_after=12), ("rate_limited", 12)),
    ("server-error", ClientProblem(503, "unavailable"), ("unavailable", None)),
    ("unreachable", ClientUnavailable("refused"), ("unavailable", None)),
    ("conflict", ClientProblem(409, "invalid_state_transition"), None),
    ("not-found", ClientProblem(404, "not_found"), None),
]


@pytest.mark.parametrize(
    ("failure", "expected"),
    [c[1:] for c in DEFERRAL_CASES],
    ids=[c[0] for c in DEFERRAL_CASES],
)
def test_deferral(
    failure: ClientProblem | ClientUnavailable, expected: tuple[str, int | None] | None
) -> None:
    deferred = deferral(failure)
    found = None if deferred is None else (deferred.code, deferred.retry_after)
    assert found == expected


@pytest.mark.parametrize(
    ("problem", "stale", "gone"),
    [
        (ClientProblem(403, "invocation_token_invalid"), True, True),
        (ClientProblem(403, "forbidden"), False, True),
        (ClientProblem(404, "not_found"), True, True),
        (ClientProblem(409, "conflict"), False, False),
        (ClientProblem(503, "unavailable"), False, False),
    ],
)
def test_refusals_for_good(problem: ClientProblem, stale: bool, gone: bool) -> None:
    assert (superseded(problem), out_of_reach(problem)) == (stale, gone)
