"""A stop that arrives while ``serve`` forks its workers ends the forking.

Found by an audit: ``serve --workers`` with a huge count went on forking after SIGTERM
(the stop signals are blocked while the parent forks, so that every pid is known when
the stop is passed on), about a thousand workers in the audit before it was killed.
The parent now looks for a pending stop before each fork.
"""

from __future__ import annotations

import os
import signal

import pytest

from turnkeeper.adapters.http.workers import EXIT_OK, STOP_SIGNALS, run_workers


@pytest.mark.parametrize("signum", STOP_SIGNALS)
def test_a_stop_pending_when_the_forking_starts_forks_no_worker(
    monkeypatch: pytest.MonkeyPatch, signum: signal.Signals
) -> None:
    forks: list[int] = []

    def counted_fork() -> int:
        forks.append(1)
        return os.fork()

    monkeypatch.setattr(os, "fork", counted_fork)
    before = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        signal.raise_signal(signum)  # held pending, as during the forking
        code = run_workers(3, lambda index: EXIT_OK)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
    assert (code, forks) == (EXIT_OK, [])
