"""Crash safety: `turnkeeper serve` killed with SIGKILL under load loses nothing acknowledged.

The server runs as a subprocess on the per-test database. People post concurrently with
client ids into main threads (Alex in Allgemein, where Lotse answers every message, and
in Eskalation with a mention; Sam and Robin elsewhere) while Lotse works through its
runs with follow-ups (start, acknowledge the follow-ups, answer with the run's id
through the freshness gate, finish). At random moments the server is killed with SIGKILL
and restarted on the same database and port; every request that got no answer is sent
again with the same client id. Afterwards:

- every post got a 2xx answer, a 200 is always a replay (``Idempotent-Replay: true``) and
  no client id got two 201;
- each acknowledged post is stored exactly once, under the id its answer named, and the
  posters' authors have no other message (nothing lost, nothing doubled);
- sending every post once more after the last restart answers 200 replays of the same
  ids and stores nothing;
- no answer was a 5xx, and every invariant of `turnkeeper.adapters.postgres.invariants` holds.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import httpx
import pytest

from tests.reliability.support_server import (
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
)
from tests.support.database import fetch
from turnkeeper.adapters.postgres.invariants import check_database

#: SIGKILLs of the server during the load.
KILLS = 3
#: Seconds of load between a restart (server ready) and the next kill: drawn uniformly.
KILL_AFTER_SECONDS = (0.4, 1.5)
#: Seconds of load after the last restart before the posters stop.
LOAD_AFTER_LAST_RESTART_SECONDS = 0.5
#: Posts per poster at most (the posters stop earlier, when the kills are done).
MAX_POSTS_PER_POSTER = 400
#: Attempts of one request at most (each failed attempt waits for the restart).
MAX_ATTEMPTS = 20
#: Rounds of the agent's loop at most.
MAX_AGENT_ROUNDS = 5000
#: Seconds the whole load may take.
LOAD_DEADLINE_SECONDS = 90.0
#: Who posts where, with which mention: (author, channel, mention).
POSTERS = (
    ("alex", "allgemein", None),
    ("alex", "eskalation", "lotse"),
    ("sam", "kampagnen", None),
    ("robin", "notizen", None),
)


async def _kill_and_restart(
    server: Server, up: asyncio.Event, rng: random.Random, kills: list[float]
) -> None:
    for _ in range(KILLS):
        delay = rng.uniform(*KILL_AFTER_SECONDS)
        await asyncio.sleep(delay)  # the random moment of the crash, not a wait for state
        up.clear()
        server.kill()
        kills.append(delay)
        server.start()
        await server.wait_ready()
        up.set()
    await asyncio.sleep(LOAD_AFTER_LAST_RESTART_SECONDS)


@pytest.mark.slow
async def test_sigkill_under_load_loses_and_doubles_nothing(
    pg_conninfo: str, tmp_path: Path
) -> None:
    env = server_env(pg_conninfo, tmp_path)
    world = demo_world(env)
    server = Server(env=env, log_dir=tmp_path)
    server.start()
    try:
        await server.wait_ready()
        up = asyncio.Event()
        up.set()
        load = Load(
            world=world,
            urls=lambda _n: server.url,
            up=up,
            deadline=time.monotonic() + LOAD_DEADLINE_SECONDS,
            max_attempts=MAX_ATTEMPTS,
        )
        rng = random.Random()
        stop = asyncio.Event()
        posts: list[Post] = []
        kills: list[float] = []
        async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_SECONDS) as client:
            posters = [
                asyncio.create_task(
                    load.post_until(
                        client,
                        post_maker(load, author, channel, prefix="crash", mention=mention),
                        posts,
                        stop,
                        MAX_POSTS_PER_POSTER,
                    )
                )
                for author, channel, mention in POSTERS
            ]
            agent_stop = asyncio.Event()
            agent = asyncio.create_task(load.agent(client, "lotse", agent_stop, MAX_AGENT_ROUNDS))
            await _kill_and_restart(server, up, rng, kills)
            stop.set()
            await asyncio.gather(*posters)
            agent_stop.set()
            await agent
            await resend_all(load, client, posts)
        assert len(kills) == KILLS
        assert load.stats.server_errors == []
        # The kills hit requests in flight: some got no answer and were sent again.
        assert load.stats.no_answer > 0
        assert load.stats.runs_finished, "the agent finished no run"
        check_answers(posts)
        await check_stored_exactly_once(pg_conninfo, load, posts)
        (followups,) = await fetch(pg_conninfo, "SELECT count(*) FROM run_followups")
        assert followups[0] > 0, "no follow-up was accepted during the load"
    finally:
        server.stop()
    assert await check_database(pg_conninfo) == []
