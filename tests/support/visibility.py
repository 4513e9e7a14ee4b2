"""What the shared event log serves a reader, against the threads the reader may open.

The rule under test (API.md, Conversation): GET /v1/events serves every reader exactly the
events of the threads it may open with GET /v1/threads/{id} at the time of the read,
restricted ones only to their audience. These helpers read both sides, through the
services or over HTTP, and compute what the log should serve from the whole log.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from tests.support.scenario import READ_ALL
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.ports import ReaderScope
from turnkeeper.domain.errors import DomainError
from turnkeeper.domain.events import Event
from turnkeeper.domain.world import Principal


async def whole_log(services: Services, principals: Iterable[Principal]) -> list[Event]:
    """Every shared event of the store, restricted ones included, in seq order.

    Read as if each principal could open every thread: a restricted event's audience
    holds its author, so the union over the authors is the whole shared log.

    Args:
        services: the services.
        principals: every principal that may have written (the world's).

    Returns:
        The events.
    """
    found: dict[int, Event] = {}
    async with services.uow() as uow:
        for principal in principals:
            scope = ReaderScope(reader_id=principal.id, everything=True)
            found.update((e.seq, e) for e in await uow.events.read(scope, 0, READ_ALL))
    return [found[seq] for seq in sorted(found)]


async def served_events(services: Services, reader: Principal, page: int) -> list[Event]:
    """The events GET /v1/events serves a reader, paged from the start to the end.

    Args:
        services: the services.
        reader: the reading principal.
        page: the page size (small, so that paging is exercised).

    Returns:
        Every event served, in the order served.
    """
    served: list[Event] = []
    after = 0
    while True:
        found = await services.conversation.list_events(reader, after=after, limit=page)
        if not found.events:
            return served
        served.extend(found.events)
        after = found.next_after


async def openable(
    services: Services, reader: Principal, thread_ids: Iterable[uuid.UUID]
) -> set[uuid.UUID]:
    """The threads GET /v1/threads/{id} lets the reader open (through the service)."""
    found: set[uuid.UUID] = set()
    for thread_id in thread_ids:
        try:
            await services.conversation.get_thread(reader, thread_id)
        except DomainError:
            continue
        found.add(thread_id)
    return found


def expected_events(
    log: Sequence[Event], reader_id: uuid.UUID, threads: set[uuid.UUID]
) -> list[int]:
    """The seqs the log must serve: events of openable threads, restricted ones if addressed.

    Args:
        log: every shared event, in seq order.
        reader_id: the reader.
        threads: the threads the reader may open.

    Returns:
        The seqs, in order.
    """
    return [
        e.seq
        for e in log
        if e.thread_id in threads and (e.restricted_to is None or reader_id in e.restricted_to)
    ]


async def http_served_seqs(http: Any, headers: dict[str, str], page: int) -> list[int]:
    """The seqs GET /v1/events serves over HTTP, paged to the end.

    Args:
        http: an AsyncTestClient of the application.
        headers: the reader's bearer header.
        page: the page size.

    Returns:
        Every seq served, in order.
    """
    seqs: list[int] = []
    after = 0
    while True:
        answer = await http.get(
            "/v1/events", params={"after": after, "limit": page}, headers=headers
        )
        assert answer.status_code == 200, answer.text
        body = answer.json()
        if not body["events"]:
            return seqs
        seqs.extend(int(e["seq"]) for e in body["events"])
        after = int(body["next_after"])


async def http_openable(
    http: Any, headers: dict[str, str], thread_ids: Iterable[uuid.UUID]
) -> set[uuid.UUID]:
    """The threads GET /v1/threads/{id} answers 200 for (404 otherwise)."""
    found: set[uuid.UUID] = set()
    for thread_id in thread_ids:
        answer = await http.get(f"/v1/threads/{thread_id}", headers=headers)
        assert answer.status_code in (200, 404), answer.text
        if answer.status_code == 200:
            found.add(thread_id)
    return found
