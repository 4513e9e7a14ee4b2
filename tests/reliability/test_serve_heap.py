"""``turnkeeper serve`` settles its heap once per process before it serves.

Each process collects once, freezes what start-up built and sets ``http.gc_threshold``
(`turnkeeper.adapters.http.server.settle_heap`), and says so in its log.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.reliability.support_server import Server, server_env

#: A threshold no default has, so that the log shows the configured one.
THRESHOLD = 4321


async def test_serve_freezes_its_start_up_and_uses_the_configured_threshold(
    pg_conninfo: str, tmp_path: Path
) -> None:
    env = server_env(pg_conninfo, tmp_path, HTTP__GC_THRESHOLD=str(THRESHOLD))
    server = Server(env=env, log_dir=tmp_path)
    server.start()
    try:
        await server.wait_ready()
        records = [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]
    finally:
        server.stop()
    (settled,) = [r for r in records if r.get("event") == "heap_settled"]
    assert settled["gc_threshold"] == THRESHOLD
    assert settled["frozen_objects"] > 0
