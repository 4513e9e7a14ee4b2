"""Revocation across processes: two `turnkeeper serve` processes on one database.

A token that one process has just served is revoked through the other: the very next
request to either process is refused (no cache window). Restarting one process with a
new ``TURNKEEPER_OWNER_TOKEN`` revokes the owner token the variable named before, at
once on the process that kept running; naming the revoked token again stops the start
with exit code 2.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from tests.reliability.support_server import (
    OWNER_TOKEN,
    REQUEST_TIMEOUT_SECONDS,
    Server,
    demo_world,
    free_port,
    run_cli,
    server_env,
    servers,
)

#: The owner token of the rotation (the variable's new value).
ROTATED_OWNER_TOKEN = "tk-owner-rotated-example.com-9876543210"
#: Requests the other process serves with a token before it is revoked (any cache of
#: resolved tokens would hold it by then).
WARM_REQUESTS = 20
#: Exit code of a start refused for its configuration.
EXIT_USAGE = 2


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def _me(client: httpx.AsyncClient, server: Server, token: str) -> int:
    return (await client.get(f"{server.url}/v1/me", headers=_bearer(token))).status_code


async def test_a_revoked_token_is_refused_at_once_by_every_process(
    pg_conninfo: str, tmp_path: Path
) -> None:
    env = server_env(pg_conninfo, tmp_path)
    world = demo_world(env)
    sam = world["people"]["sam"]["id"]
    with servers(env, tmp_path, 2) as (first, second):
        await asyncio.gather(first.wait_ready(), second.wait_ready())
        async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_SECONDS) as client:
            issued = await client.post(
                f"{first.url}/v1/principals/{sam}/tokens",
                json={"label": "laptop"},
                headers=_bearer(OWNER_TOKEN),
            )
            assert issued.status_code == 201, issued.text
            token, token_id = issued.json()["token"], issued.json()["id"]
            for _ in range(WARM_REQUESTS):
                assert await _me(client, second, token) == 200

            revoked = await client.delete(
                f"{first.url}/v1/principals/{sam}/tokens/{token_id}", headers=_bearer(OWNER_TOKEN)
            )
            assert revoked.status_code == 204
            assert await _me(client, second, token) == 401
            assert await _me(client, first, token) == 401
            listed = await client.get(
                f"{second.url}/v1/principals/{sam}/tokens", headers=_bearer(OWNER_TOKEN)
            )
            assert token_id not in {t["id"] for t in listed.json()["tokens"]}
            assert await _me(client, second, world["people"]["sam"]["token"]) == 200


async def test_a_changed_owner_token_revokes_the_one_before_on_every_process(
    pg_conninfo: str, tmp_path: Path
) -> None:
    env = server_env(pg_conninfo, tmp_path)
    demo_world(env)
    rotated = {**env, "TURNKEEPER_OWNER_TOKEN": ROTATED_OWNER_TOKEN}
    with servers(env, tmp_path, 1) as (running,):
        await running.wait_ready()
        async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_SECONDS) as client:
            for _ in range(WARM_REQUESTS):
                assert await _me(client, running, OWNER_TOKEN) == 200
            restarted = Server(env=rotated, log_dir=tmp_path)
            try:
                restarted.start()
                await restarted.wait_ready()
                assert await _me(client, running, OWNER_TOKEN) == 401
                assert await _me(client, restarted, OWNER_TOKEN) == 401
                assert await _me(client, running, ROTATED_OWNER_TOKEN) == 200
            finally:
                restarted.stop()

    # The leaked token named again: the start is refused before anything is served.
    done = run_cli(env, "serve", "--no-jobs", "--port", str(free_port()))
    assert done.returncode == EXIT_USAGE, done.stderr
    assert "revoked" in done.stderr
    assert OWNER_TOKEN not in done.stderr + done.stdout
