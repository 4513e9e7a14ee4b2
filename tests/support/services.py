"""Services over a unit of work factory with the test fakes (one builder for every suite)."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

from tests.support.fakes import FakeClock, SequentialIds, signer
from turnkeeper.adapters.memory import MemoryUnitOfWorkFactory
from turnkeeper.application.bootstrap import Services, build_services
from turnkeeper.application.ports import IdGenerator, UnitOfWork, UnitOfWorkFactory
from turnkeeper.application.settings import Settings


def services_over(
    uow_factory: UnitOfWorkFactory,
    settings: Settings | None = None,
    clock: FakeClock | None = None,
    ids: IdGenerator | None = None,
) -> Services:
    """Services with a fake clock, sequential ids and the test signing key.

    Args:
        uow_factory: the store (memory, PostgreSQL, or a wrapper of either).
        settings: the settings; the defaults when None.
        clock: the clock; a new `FakeClock` when None.
        ids: the id generator; new `SequentialIds` when None.

    Returns:
        The services.
    """
    return build_services(
        uow_factory,
        settings if settings is not None else Settings(),
        clock if clock is not None else FakeClock(),
        ids if ids is not None else SequentialIds(),
        signer(),
    )


def memory_services(settings: Settings | None = None, clock: FakeClock | None = None) -> Services:
    """Services over a fresh memory store (see `services_over`)."""
    return services_over(MemoryUnitOfWorkFactory(), settings, clock)


class CountingFactory:
    """The real factory, counting the units it opens (read-only and writing)."""

    def __init__(self, inner: UnitOfWorkFactory) -> None:
        self.inner = inner
        self.reads = 0
        self.writes = 0

    def __call__(self) -> AbstractAsyncContextManager[UnitOfWork]:
        self.writes += 1
        return self.inner()

    def read_only(self) -> AbstractAsyncContextManager[UnitOfWork]:
        self.reads += 1
        return self.inner.read_only()
