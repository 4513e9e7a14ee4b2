"""The world a server starts with: its owner, and the demo world when asked for.

`turnkeeper serve` prepares it before it serves (in the parent, once, before several
workers fork) and `turnkeeper demo-world` builds the demo world alone. Each prints the
tokens it creates once, as one JSON document on standard output; a token not printed
then is never shown again. So a world is never left half made: the demo world is built
in memory first (`check_demo_world`), and a stop while the owner and the world are
stored waits until they are, and printed (`stop_signals_held`). On PostgreSQL the setup
is one process at a time (`turnkeeper.adapters.postgres.world_lock`, ADR 0041): servers
that start together on a new database make one owner and one world.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import attrs

from turnkeeper.adapters.config import Config, ConfigError
from turnkeeper.adapters.postgres.world_lock import world_setup_lock
from turnkeeper.adapters.wiring import Backend, memory_backend, stop_signals_held
from turnkeeper.application.demo import build_demo_world
from turnkeeper.application.services.admin import NewPrincipal
from turnkeeper.application.settings import Settings
from turnkeeper.domain.errors import DomainError, ValidationFailed

#: The handle of the owner a server creates in a new world.
OWNER_HANDLE = "owner"
#: The handle of the owner of the demo world (DESIGN.md section 11: Robin owns everything).
DEMO_OWNER_HANDLE = "robin"


def print_json(document: object) -> None:
    """Print one JSON document on standard output, flushed (a supervisor reads it live).

    Args:
        document: any JSON-encodable value.
    """
    print(json.dumps(document, indent=2), flush=True)


async def world_is_empty(backend: Backend) -> bool:
    """Whether the store holds no space yet (a new world).

    Args:
        backend: the store and services.

    Returns:
        True when there is no space.
    """
    async with backend.services.uow() as uow:
        return not await uow.spaces.list_all()


async def check_demo_world(settings: Settings) -> None:
    """Build the demo world in memory first, so that a stored one is never left half made.

    The demo world is built by many use cases, each its own unit: one refused by the
    settings (a ``principal.max_handle_length`` below a demo handle) left the owner and
    some principals stored, their tokens never printed, and every later ``--demo``
    start refused. The memory store refuses exactly what PostgreSQL would.

    Args:
        settings: the configuration the world will be built under.

    Raises:
        ConfigError: the demo world does not fit the settings (naming what failed).
    """
    trial = memory_backend(attrs.evolve(settings, metrics_enabled=False))
    try:
        await build_demo_world(trial.services)
    except DomainError as exc:
        errors = exc.errors if isinstance(exc, ValidationFailed) else ()
        failed = ", ".join(f"{error.pointer} {error.code}" for error in errors)
        raise ConfigError(
            f"the demo world does not fit these settings: {exc.code}"
            + (f" ({failed})" if failed else "")
        ) from exc


async def _owner_for_demo(backend: Backend, config: Config) -> NewPrincipal:
    created = await backend.services.admin.ensure_owner(DEMO_OWNER_HANDLE, config.owner_token)
    if created is not None:
        return created
    if config.owner_token is None:
        raise ConfigError("an owner exists already: set TURNKEEPER_OWNER_TOKEN to its token")
    principal = await backend.services.identity.authenticate(config.owner_token)
    return NewPrincipal(principal=principal, token=config.owner_token)


async def store_demo_world(backend: Backend, config: Config) -> None:
    """Store the demo world, its owner included, and print it with its tokens.

    A stop while they are stored and printed waits until both are done: a world stored
    without its tokens shown would be of no use to anyone.

    Args:
        backend: the store of a world checked empty, after `check_demo_world`.
        config: for ``TURNKEEPER_OWNER_TOKEN`` (the owner's token, when set).

    Raises:
        ConfigError: an owner exists and ``TURNKEEPER_OWNER_TOKEN`` is not set.
    """
    with stop_signals_held():
        owner = await _owner_for_demo(backend, config)
        world = await build_demo_world(backend.services, owner)
        # The demo document names the owner with its token: printed once, here.
        print_json(world.to_json())


@asynccontextmanager
async def setting_up(conninfo: str | None) -> AsyncIterator[None]:
    """The setup of the world alone: under the world setup lock on PostgreSQL.

    Args:
        conninfo: the database the backend stores in; None for the memory store, which
            one process holds.

    Yields:
        Nothing; no other process sets this database's world up meanwhile.

    Raises:
        StoreUnavailable: the database cannot be reached.
    """
    if conninfo is None:
        yield
        return
    async with world_setup_lock(conninfo):
        yield


async def prepare_world(
    config: Config, backend: Backend, *, demo: bool, conninfo: str | None = None
) -> None:
    """The owner (its token printed when new), and the demo world when asked and empty.

    Args:
        config: the settings and ``TURNKEEPER_OWNER_TOKEN``.
        backend: the store and services.
        demo: ``serve --demo``: build the demo world when the world is empty.
        conninfo: the database of a PostgreSQL backend, whose world is set up by one
            process at a time (`setting_up`); None for the memory store.

    Raises:
        ConfigError: the demo world does not fit the settings, or an owner exists and
            its token is needed but not set.
        StoreUnavailable: the database cannot be reached.
    """
    async with setting_up(conninfo):
        await _prepare(config, backend, demo=demo)


async def _prepare(config: Config, backend: Backend, *, demo: bool) -> None:
    if demo and await world_is_empty(backend):
        await check_demo_world(config.settings)
        await store_demo_world(backend, config)
        return
    # As for the demo world: a stop waits until the owner is stored and its token shown.
    with stop_signals_held():
        owner = await backend.services.admin.ensure_owner(OWNER_HANDLE, config.owner_token)
        if owner is not None and config.owner_token is None:
            print_json({"owner": {"id": str(owner.principal.id), "token": owner.token}})
