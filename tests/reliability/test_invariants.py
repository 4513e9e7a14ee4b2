"""The invariants as code: they hold after real scenarios, and each one can fail.

Every state is built through the application services on PostgreSQL; a test then breaks
exactly one rule with raw SQL and expects `check_invariants` (and ``turnkeeper check``)
to name it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.reliability.support import Scenario, broken, busy_world, violations
from tests.support.database import execute
from tests.support.services import services_over
from turnkeeper.adapters.postgres.invariants import CHECKS, Invariant
from turnkeeper.application.demo import build_demo_world
from turnkeeper.application.ports import UnitOfWorkFactory

#: Seconds the ``turnkeeper check`` subprocess may take.
CLI_TIMEOUT_SECONDS = 60
TURNKEEPER = Path(sys.executable).with_name("turnkeeper")


@pytest.fixture
async def scenario(pg_uow_factory: UnitOfWorkFactory) -> Scenario:
    services = services_over(pg_uow_factory)
    world = await build_demo_world(services)
    return await busy_world(services, world)


async def test_every_invariant_holds_after_a_busy_scenario(
    scenario: Scenario, pg_conninfo: str
) -> None:
    assert await violations(pg_conninfo) == []


def test_every_invariant_has_a_check() -> None:
    assert {invariant for invariant, _ in CHECKS} == set(Invariant)


async def _break(conninfo: str, statements: list[str], params: dict[str, object]) -> None:
    for statement in statements:
        await execute(conninfo, statement, params)


# Each case: the invariant, the raw SQL that breaks exactly that rule, and which
# scenario id the violation must name.
CORRUPTIONS: list[tuple[Invariant, list[str], str]] = [
    (
        Invariant.THREAD_SEQ,
        ["UPDATE threads SET latest_seq = latest_seq + 1 WHERE id = %(thread)s"],
        "thread",
    ),
    (
        Invariant.THREAD_SEQ,
        [
            "ALTER TABLE messages DROP CONSTRAINT messages_thread_seq_key",
            "UPDATE messages SET thread_seq = 1 WHERE id = %(agent_message)s",
        ],
        "thread",
    ),
    (
        Invariant.ONE_ACTIVE_RUN,
        [
            "DROP INDEX runs_one_active_per_thread",
            "UPDATE runs SET state = 'running' WHERE id = %(ended_run)s",
        ],
        "thread",
    ),
    (
        Invariant.NO_OPEN_FOLLOWUP_ON_ENDED_RUN,
        [
            "UPDATE run_followups SET state = 'delivered' WHERE run_id = %(ended_run)s "
            "AND message_id = %(active_trigger)s"
        ],
        "active_trigger",
    ),
    (
        Invariant.RUN_VERSION,
        ["UPDATE runs SET version = version + 1 WHERE id = %(ended_run)s"],
        "ended_run",
    ),
    (
        Invariant.TRIGGER_STATE,
        ["UPDATE messages SET trigger_state = 'done' WHERE id = %(active_trigger)s"],
        "active_trigger",
    ),
    (
        Invariant.TRIGGER_STATE,
        [
            "UPDATE messages SET trigger_state = 'working' WHERE id = "
            "(SELECT triggering_message_id FROM runs WHERE id = %(ended_run)s)"
        ],
        None,  # type: ignore[list-item]
    ),
    (
        Invariant.TRIGGER_REASON,
        ["UPDATE messages SET trigger_state_reason = 'all good' WHERE id = %(active_trigger)s"],
        "active_trigger",
    ),
    (
        Invariant.NON_HUMAN_TRIGGER_STATE,
        [
            "UPDATE messages SET origin = 'human', trigger_state = 'received' "
            "WHERE id = %(agent_message)s"
        ],
        "agent_message",
    ),
    (
        Invariant.NULL_PAYLOAD,
        [
            "UPDATE events SET payload = jsonb_set(payload, '{version}', 'null') "
            "WHERE seq = (SELECT max(seq) FROM events WHERE type = 'run.state_changed')"
        ],
        None,  # type: ignore[list-item]
    ),
    (
        Invariant.NULL_PAYLOAD,
        [
            "UPDATE events SET payload = jsonb_set(payload, '{message,content}', 'null') "
            "WHERE seq = (SELECT max(seq) FROM events WHERE type = 'message.created')"
        ],
        None,  # type: ignore[list-item]
    ),
    (
        Invariant.PERSONAL_CONTENT,
        [
            'UPDATE events SET payload = payload || \'{"content": "secret"}\' '
            "WHERE seq = (SELECT min(seq) FROM events WHERE audience_id IS NOT NULL)"
        ],
        None,  # type: ignore[list-item]
    ),
    (
        Invariant.PERSONAL_CONTENT,
        [
            'UPDATE events SET payload = payload || \'{"message": {"id": "x"}}\' '
            "WHERE seq = (SELECT max(seq) FROM events WHERE type = 'agent.followup')"
        ],
        None,  # type: ignore[list-item]
    ),
]


@pytest.mark.parametrize(
    ("invariant", "statements", "subject"),
    CORRUPTIONS,
    ids=[f"{inv.value}-{i}" for i, (inv, _, _) in enumerate(CORRUPTIONS)],
)
async def test_each_check_finds_its_corruption(
    scenario: Scenario,
    pg_conninfo: str,
    invariant: Invariant,
    statements: list[str],
    subject: str | None,
) -> None:
    ids = {
        "thread": scenario.thread_id,
        "ended_run": scenario.ended_run_id,
        "active_run": scenario.active_run_id,
        "active_trigger": scenario.active_trigger_id,
        "agent_message": scenario.agent_message_id,
    }
    await _break(pg_conninfo, statements, dict(ids))
    found = await violations(pg_conninfo)
    assert invariant in broken(found)
    if subject is not None:
        assert ids[subject] in {v.subject_id for v in found if v.invariant is invariant}


def _check_cli(conninfo: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TURNKEEPER_DATABASE_URL": conninfo}
    return subprocess.run(
        [str(TURNKEEPER), "check"],
        env=env,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_SECONDS,
        check=False,
    )


async def test_turnkeeper_check_exits_0_then_1_with_one_line_per_violation(
    scenario: Scenario, pg_conninfo: str
) -> None:
    clean = _check_cli(pg_conninfo)
    assert (clean.returncode, clean.stdout) == (0, ""), clean.stderr
    await execute(
        pg_conninfo,
        "UPDATE runs SET version = version + 1 WHERE id = %(run)s",
        {"run": scenario.ended_run_id},
    )
    await execute(
        pg_conninfo,
        "UPDATE threads SET latest_seq = latest_seq + 3 WHERE id = %(thread)s",
        {"thread": scenario.thread_id},
    )
    dirty = _check_cli(pg_conninfo)
    assert dirty.returncode == 1
    lines = dirty.stdout.splitlines()
    assert lines == [
        f"thread_seq_contiguous {scenario.thread_id} " + lines[0].split(" ", 2)[2],
        f"run_version_counts_changes {scenario.ended_run_id} " + lines[1].split(" ", 2)[2],
    ]
