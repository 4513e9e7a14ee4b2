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


async def _demo_world(conninfo: str, *args: str, **settings: str) -> tuple[int, list[str], str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("TURNKEEPER_")}
    env.update(TURNKEEPER_DATABASE_URL=conninfo, PYTHONPATH=str(ROOT), **settings)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "turnkeeper.adapters.cli",
        *(args or ("demo-world",)),
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


#: A handle limit below the demo's longest handle (``assistent``).
SHORT_HANDLES = {"TURNKEEPER_PRINCIPAL__MAX_HANDLE_LENGTH": "6"}
#: The line of a demo world that does not fit the settings.
DOES_NOT_FIT = (
    "turnkeeper: invalid configuration: the demo world does not fit these settings: "
    "validation_failed (/handle too_long)"
)


async def test_a_demo_world_the_settings_refuse_stores_nothing(
    pg_conninfo: str, pg_uow_factory: UnitOfWorkFactory
) -> None:
    # Found by an audit: the owner and the first principals were stored before a use
    # case refused a handle, their tokens never printed, and every later start refused.
    for command in (("demo-world",), ("serve", "--demo", "--port", "0")):
        code, err, out = await _demo_world(pg_conninfo, *command, **SHORT_HANDLES)

        assert (code, err[-1:], out) == (EXIT_USAGE, [DOES_NOT_FIT], ""), command
        async with pg_uow_factory.read_only() as uow:
            assert await uow.principals.owner() is None, command
