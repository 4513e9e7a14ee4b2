"""Embedding turnkeeper: the same program on the memory store, then on PostgreSQL.

Run it from anywhere once turnkeeper is installed:

    python embedding.py            # memory, then PostgreSQL
    python embedding.py memory     # memory only (no database, no extra needed)
    python embedding.py postgres   # PostgreSQL only

PostgreSQL is ``TURNKEEPER_DATABASE_URL`` when it is set, else the embedded server of
``turnkeeper[embedded]`` in a temporary directory. The program creates a small world
(the owner Robin, the person Alex, the agent Lotse as the operator of a space), posts a
message that opens a run for Lotse, and prints what the event log shows.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
import tempfile
from pathlib import Path

import turnkeeper
from turnkeeper import (
    Backend,
    BillingMode,
    ChannelType,
    EmbeddedPostgres,
    Level,
    MessageDraft,
    PrincipalKind,
    ResourceKind,
    Settings,
)


async def scenario(backend: Backend) -> list[str]:
    """Build a world, post one message, and list the shared events it caused.

    Args:
        backend: the services over memory or PostgreSQL.

    Returns:
        The types of the events in the log, oldest first.
    """
    services = backend.services
    # The first owner comes with a token; everything else goes through the services.
    owner = await services.admin.ensure_owner("robin", None)
    assert owner is not None
    robin = owner.principal
    alex = await services.admin.create_principal(
        robin, kind=PrincipalKind.PERSON, handle="alex", display_name="Alex"
    )
    lotse = await services.admin.create_principal(
        robin, kind=PrincipalKind.AGENT, handle="lotse", billing_mode=BillingMode.ORGANIZATION
    )
    space = await services.admin.create_space(
        robin, name="Support", default_operator_id=lotse.principal.id
    )
    channel = await services.admin.create_channel(
        robin, space.id, name="Allgemein", type=ChannelType.TEXT
    )
    await services.admin.set_behavior(robin, channel.id, free_response=True)
    await services.admin.create_grant(
        robin,
        principal_id=alex.principal.id,
        resource_kind=ResourceKind.SPACE,
        resource_id=space.id,
        level=Level.TRIGGER,
    )

    # A person's message in the main thread of a free_response channel opens a run.
    assert channel.main_thread_id is not None
    posted = await services.conversation.create_message(
        alex.principal,
        channel.main_thread_id,
        MessageDraft(client_msg_id="alex-1", content="Alex here: the printer is down."),
    )
    print(f"  message {posted.message.thread_seq} stored, replayed={posted.replayed}")

    # Any reader pages through the log with a cursor; Alex sees the thread's events.
    page = await services.conversation.list_events(alex.principal, after=0)
    types = [str(event.type) for event in page.events]
    for event in page.events:
        print(f"  event {event.seq}: {event.type}")
    return types


async def on_memory() -> list[str]:
    """The scenario on the in-process store (nothing survives the process)."""
    return await scenario(turnkeeper.memory_backend(Settings()))


async def on_postgres(conninfo: str) -> list[str]:
    """The scenario on PostgreSQL, after applying the migrations.

    Args:
        conninfo: a libpq URI of an empty database.
    """
    await turnkeeper.migrate(conninfo)
    key = secrets.token_bytes(32)  # the invocation token key; keep it stable in production
    async with turnkeeper.postgres_backend(conninfo, Settings(), key) as backend:
        return await scenario(backend)


def main(argv: list[str]) -> int:
    """Run the scenario on the stores named in `argv` (both when empty)."""
    stores = argv or ["memory", "postgres"]
    for store in stores:
        print(f"{store}:")
        if store == "memory":
            types = asyncio.run(on_memory())
        elif os.environ.get("TURNKEEPER_DATABASE_URL"):
            types = asyncio.run(on_postgres(os.environ["TURNKEEPER_DATABASE_URL"]))
        else:
            with tempfile.TemporaryDirectory() as folder:
                server = EmbeddedPostgres.start(Path(folder), cleanup_mode="delete")
                try:
                    types = asyncio.run(on_postgres(server.conninfo))
                finally:
                    server.stop()
        if "agent.invocation" in types or "message.created" not in types:
            print("  unexpected events: personal events never reach the shared log")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
