"""Helpers of the operations tests: scraping /metrics and driving a scenario over HTTP."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any, cast

import attrs
from prometheus_client.parser import text_string_to_metric_families

from tests.support.http import ContractClient, bearer, contract_client
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld
from turnkeeper.application.errors import RetriableConflict
from turnkeeper.application.ports import UnitOfWork, UnitOfWorkFactory

SEND = "/v1/agent/send"
UUID_PATTERN = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@attrs.frozen
class Samples:
    """One scrape of /metrics: every sample by name and label set."""

    values: dict[tuple[str, frozenset[tuple[str, str]]], float]
    families: frozenset[str]

    def value(self, name: str, **labels: str) -> float:
        """The sample's value, 0 when it is absent."""
        return self.values.get((name, frozenset(labels.items())), 0.0)

    def label_values(self) -> Iterator[str]:
        """Every label value of every turnkeeper sample."""
        for name, labels in self.values:
            if name.startswith("turnkeeper_"):
                for _, value in labels:
                    yield value


async def scrape(client: ContractClient) -> Samples:
    """GET /metrics, parsed with prometheus-client's own parser."""
    answer = await client.get("/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    values: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    families: set[str] = set()
    for family in text_string_to_metric_families(answer.text):
        families.add(family.name)
        for sample in family.samples:
            values[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return Samples(values=values, families=frozenset(families))


def token_of(world: DemoWorld, handle: str) -> dict[str, str]:
    """The Authorization header of a person or agent of the demo world."""
    found = world.people.get(handle) or world.agents[handle]
    return bearer(found.token)


def allgemein(world: DemoWorld) -> str:
    """The main thread of Support/Allgemein (free response: Alex's messages trigger)."""
    return str(world.channels["allgemein"].main_thread_id)


def eskalation(world: DemoWorld) -> str:
    """The main thread of Support/Eskalation (nothing triggers without a mention)."""
    return str(world.channels["eskalation"].main_thread_id)


async def post(
    client: ContractClient, world: DemoWorld, who: str, thread: str, cid: str, content: str
) -> Any:
    """createMessage as a person or agent; the answer."""
    return await client.post(
        f"/v1/threads/{thread}/messages",
        json={"client_msg_id": cid, "content": content},
        headers=token_of(world, who),
    )


def send_body(thread: str, cid: str, seen: int, content: str) -> dict[str, Any]:
    """A gated agent send."""
    return {
        "target": thread,
        "content": content,
        "client_message_id": cid,
        "freshness": {"target_key": f"thread:{thread}", "seen_up_to_seq": seen},
    }


async def invocation(client: ContractClient, world: DemoWorld) -> tuple[str, str]:
    """Lotse polls, acks and returns (run id, invocation token) of its one invocation."""
    lotse = token_of(world, "lotse")
    page = (await client.get("/v1/agent/events", headers=lotse)).json()
    (event,) = [e for e in page["events"] if e["type"] == "agent.invocation"]
    await client.post(
        "/v1/agent/events/ack", json={"through_seq": page["next_after"]}, headers=lotse
    )
    return str(event["payload"]["run_id"]), str(event["invocation_token"])


async def start(client: ContractClient, world: DemoWorld, run_id: str, token: str) -> None:
    """Lotse starts its run with the delivered token."""
    started = await client.post(
        f"/v1/runs/{run_id}/start",
        json={"invocation_token": token},
        headers=token_of(world, "lotse"),
    )
    assert (started.status_code, started.json()["state"]) == (200, "running")


class FailingCommits:
    """A unit-of-work factory whose next commits fail as a retriable conflict.

    The work of the failing attempt runs completely (it appends its events, adds its
    runs); only its commit fails, as a deadlock detected at COMMIT would, and the
    transactor reruns the whole unit.
    """

    def __init__(self, inner: UnitOfWorkFactory) -> None:
        self._inner = inner
        self.failures = 0
        self.failed = 0

    def __call__(self) -> Any:
        return self._unit()

    def read_only(self) -> Any:
        return self._inner.read_only()

    @asynccontextmanager
    async def _unit(self) -> AsyncIterator[UnitOfWork]:
        async with self._inner() as uow:
            if self.failures == 0:
                yield uow
                return
            self.failures -= 1
            self.failed += 1
            yield cast("UnitOfWork", _CommitFails(uow))


class _CommitFails:
    def __init__(self, inner: UnitOfWork) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def commit(self) -> None:
        raise RetriableConflict("deadlock", reason="deadlock_detected")


@asynccontextmanager
async def client_of(services: Services) -> AsyncIterator[ContractClient]:
    """A checked client of a new application over the services."""
    async with contract_client(services) as client:
        yield client
