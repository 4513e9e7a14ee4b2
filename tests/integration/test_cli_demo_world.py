"""``turnkeeper demo-world`` on a real database where an owner exists already."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from tests.support.services import services_over
from turnkeeper.adapters.cli import EXIT_USAGE
from turnkeeper.application.ports import UnitOfWorkFactory

ROOT = Path(__file__).resolve().parents[2]


async def _demo_world(conninfo: str) -> tuple[int, list[str], str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("TURNKEEPER_")}
    env.update(TURNKEEPER_DATABASE_URL=conninfo, PYTHONPATH=str(ROOT))
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "turnkeeper.adapters.cli",
        "demo-world",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, err.decode().strip().splitlines(), out.decode()


async def test_an_existing_owner_without_its_token_is_bad_configuration(
    pg_conninfo: str, pg_uow_factory: UnitOfWorkFactory
) -> None:
    services = services_over(pg_uow_factory)
    assert await services.admin.ensure_owner("robin", None) is not None

    code, err, out = await _demo_world(pg_conninfo)

    assert code == EXIT_USAGE
    assert len(err) == 1, err
    assert err[0].startswith("turnkeeper: invalid configuration: an owner exists already")
    assert "TURNKEEPER_OWNER_TOKEN" in err[0]
    assert out == ""
    async with pg_uow_factory.read_only() as uow:
        assert await uow.spaces.list_all() == []
