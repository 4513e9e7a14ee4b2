"""Scale-out: several processes on one database keep every guarantee of one process.

The locks live in PostgreSQL, not in the process. Two `turnkeeper serve` processes on
the per-test database take the load of the crash test, every client alternating between
them request by request (two Lotse workers compete for the same runs), and the same
guarantees hold: every acknowledged post is stored exactly once, a repeated request
replays on either process, the same request sent to both at once is stored once (one
201, one 200 replay), and the invariants hold (one active run per thread, thread_seq
without gaps, ...).

Two `turnkeeper jobs --once` runners started at once over due runs (a tiny
``run.queued_max_age`` through the environment, so that runs become due in real time;
due-ness is polled with a deadline) end every run exactly once: one end event per run,
and the runners' counts add up to the number of due runs.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import pytest

from tests.reliability.support_server import (
    CLI_TIMEOUT_SECONDS,
    REQUEST_TIMEOUT_SECONDS,
    Load,
    Post,
    Server,
    check_answers,
    check_stored_exactly_once,
    demo_world,
    post_maker,
    resend_all,
    server_env,
    servers,
    start_cli,
)
from tests.support.database import fetch
from turnkeeper.adapters.postgres.invariants import check_database

#: `turnkeeper serve` processes on the one database.
SERVER_COUNT = 2
#: Seconds of concurrent load.
LOAD_SECONDS = 4.0
#: Posts per poster at most (the posters stop after `LOAD_SECONDS`).
MAX_POSTS_PER_POSTER = 400
#: Attempts of one request at most.
MAX_ATTEMPTS = 5
#: Rounds of each agent worker's loop at most.
MAX_AGENT_ROUNDS = 5000
#: Seconds the whole load may take.
LOAD_DEADLINE_SECONDS = 60.0
#: Client ids sent to both processes at the same moment.
SIMULTANEOUS_DUPLICATES = 20
#: Who posts where: (author, channel, mention).
POSTERS = (
    ("alex", "allgemein", None),
    ("alex", "eskalation", "lotse"),
    ("sam", "kampagnen", "texter"),
    ("robin", "notizen", None),
)
#: Agent workers: Lotse twice (they compete for its runs), Texter once.
AGENT_WORKERS = ("lotse", "lotse", "texter")

#: Runs made due for the job runners (one forum thread each).
DUE_RUNS = 40
#: ``run.queued_max_age`` of the job runners, in seconds (runs are due this soon).
TINY_QUEUED_MAX_AGE = 1
#: ``jobs.batch_size`` of the runners: small, so that their units interleave.
JOBS_BATCH_SIZE = 2
#: Job runners started at once.
JOB_RUNNERS = 2
#: Seconds to wait for the runs to become due.
DUE_DEADLINE_SECONDS = 30.0
#: Seconds between two due-ness polls.
DUE_POLL_SECONDS = 0.1


@pytest.mark.slow
async def test_two_servers_under_one_load_keep_every_guarantee(
    pg_conninfo: str, tmp_path: Path
) -> None:
    env = server_env(pg_conninfo, tmp_path)
    world = demo_world(env)
    with servers(env, tmp_path, SERVER_COUNT) as started:
        await asyncio.gather(*(s.wait_ready() for s in started))
        up = asyncio.Event()
        up.set()
        load = Load(
            world=world,
            urls=lambda n: started[n % len(started)].url,
            up=up,
            deadline=time.monotonic() + LOAD_DEADLINE_SECONDS,
            max_attempts=MAX_ATTEMPTS,
        )
        stop = asyncio.Event()
        posts: list[Post] = []
        async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_SECONDS) as client:
            posters = [
                asyncio.create_task(
                    load.post_until(
                        client,
                        post_maker(load, author, channel, prefix="scale", mention=mention),
                        posts,
                        stop,
                        MAX_POSTS_PER_POSTER,
                    )
                )
                for author, channel, mention in POSTERS
            ]
            agent_stop = asyncio.Event()
            agents = [
                asyncio.create_task(load.agent(client, handle, agent_stop, MAX_AGENT_ROUNDS))
                for handle in AGENT_WORKERS
            ]
            await asyncio.sleep(LOAD_SECONDS)  # the length of the load, not a wait for state
            stop.set()
            await asyncio.gather(*posters)
            agent_stop.set()
            await asyncio.gather(*agents)
            # Round robin: a repeated request mostly lands on the other process.
            await resend_all(load, client, posts)
            duplicates = await _same_request_on_every_server(load, client, started)
        assert load.stats.server_errors == []
        assert load.stats.runs_finished, "the agents finished no run"
        check_answers(posts)
        await check_stored_exactly_once(pg_conninfo, load, posts + duplicates)
    assert await check_database(pg_conninfo) == []


async def _same_request_on_every_server(
    load: Load, client: httpx.AsyncClient, started: list[Server]
) -> list[Post]:
    """Each post sent to every process at the same moment: one 201, the others replays."""
    make = post_maker(load, "alex", "eskalation", prefix="twin")
    posts = [make(i) for i in range(SIMULTANEOUS_DUPLICATES)]
    for post in posts:
        answers = await asyncio.gather(
            *(
                client.post(
                    f"{server.url}/v1/threads/{post.thread_id}/messages",
                    json=post.body(),
                    headers={"Authorization": f"Bearer {load.token(post.author)}"},
                )
                for server in started
            )
        )
        statuses = sorted(a.status_code for a in answers)
        assert statuses == [200] * (len(started) - 1) + [201], [a.text for a in answers]
        assert {a.json()["id"] for a in answers} == {answers[0].json()["id"]}
        for answer in answers:
            replayed = answer.headers.get("Idempotent-Replay")
            assert replayed == ("true" if answer.status_code == 200 else None)
        post.statuses = [a.status_code for a in answers]
        post.replay_headers = [a.headers.get("Idempotent-Replay") for a in answers]
        post.message_id = str(answers[0].json()["id"])
    return posts


async def _open_due_runs(load: Load, client: httpx.AsyncClient) -> None:
    """Alex opens forum threads in Bulletin; each opens a queued run for Lotse."""
    channel = load.world["channels"]["bulletin"]["id"]
    for index in range(DUE_RUNS):
        answer = await load.until_answered(
            client,
            "POST",
            f"/v1/channels/{channel}/threads",
            "alex",
            {
                "title": f"Question {index}",
                "first_message": {
                    "client_msg_id": f"due-{index}",
                    "content": f"Alex asks question {index}",
                },
            },
        )
        assert answer.status_code == 201, answer.text


async def _wait_until_due(conninfo: str) -> None:
    deadline = time.monotonic() + DUE_DEADLINE_SECONDS
    while time.monotonic() < deadline:
        ((due,),) = await fetch(
            conninfo,
            "SELECT count(*) FROM runs WHERE state = 'queued' "
            "AND created_at < now() - make_interval(secs => %(age)s)",
            {"age": TINY_QUEUED_MAX_AGE},
        )
        if due == DUE_RUNS:
            return
        await asyncio.sleep(DUE_POLL_SECONDS)
    raise AssertionError(f"the runs were not due within {DUE_DEADLINE_SECONDS}s")


async def test_two_job_runners_at_once_end_every_run_exactly_once(
    pg_conninfo: str, tmp_path: Path
) -> None:
    env = server_env(pg_conninfo, tmp_path)
    world = demo_world(env)
    with servers(env, tmp_path, 1) as started:
        await started[0].wait_ready()
        load = Load(
            world=world,
            urls=lambda _n: started[0].url,
            up=asyncio.Event(),
            deadline=time.monotonic() + LOAD_DEADLINE_SECONDS,
            max_attempts=MAX_ATTEMPTS,
        )
        async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_SECONDS) as client:
            await _open_due_runs(load, client)
    await _wait_until_due(pg_conninfo)
    jobs_env = {
        **env,
        "TURNKEEPER_RUN__QUEUED_MAX_AGE": str(TINY_QUEUED_MAX_AGE),
        "TURNKEEPER_JOBS__BATCH_SIZE": str(JOBS_BATCH_SIZE),
    }
    runners = [start_cli(jobs_env, "jobs", "--once") for _ in range(JOB_RUNNERS)]
    outputs = [runner.communicate(timeout=CLI_TIMEOUT_SECONDS) for runner in runners]
    for runner, (_, stderr) in zip(runners, outputs, strict=True):
        assert runner.returncode == 0, stderr
    counts = [json.loads(stdout) for stdout, _ in outputs]
    assert sum(c["queued_expiry"] for c in counts) == DUE_RUNS, counts
    ends = await fetch(
        pg_conninfo,
        "SELECT resource_id::text, count(*), min(payload->>'state'), "
        "min(payload->>'state_reason') FROM events WHERE type = 'run.state_changed' "
        "AND payload->>'state' IN ('completed', 'failed', 'cancelled') GROUP BY resource_id",
    )
    runs = await fetch(pg_conninfo, "SELECT id::text, state, state_reason FROM runs")
    assert len(runs) == DUE_RUNS
    assert {r[0]: (1, "failed", "queued_expired") for r in ends} == {
        run_id: (1, "failed", "queued_expired") for run_id, _, _ in runs
    }
    assert [tuple(r[1:]) for r in ends] == [(1, "failed", "queued_expired")] * DUE_RUNS
    assert {(state, reason) for _, state, reason in runs} == {("failed", "queued_expired")}
    assert await check_database(pg_conninfo) == []
