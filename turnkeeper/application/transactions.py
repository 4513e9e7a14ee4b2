"""Running a use case as one unit of work: commit, retry, and audit of denials.

`Transactor.run` opens a unit, runs the work on it (as a `TrackedUnit`, so that the work
can answer with the rows as they commit), commits, and reruns the whole work on a
`RetriableConflict` (deadlock, serialization failure, unique-key race) up to
``database.tx_retry_max`` times. An `AccessDenied` rolls the unit back and is recorded,
aggregated (`turnkeeper.application.audit`), in a unit of its own before it propagates,
because the audit must survive the refusal it describes.

Each use case runs in a span of the `Telemetry` sink (named after the use case), and the
changes of the attempt that committed, and only of that one, are reported to it after
the commit (the unit's `TrackedUnit.changes`).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import TypeVar

from turnkeeper.application.audit import DenialAudit
from turnkeeper.application.errors import ApplicationError, RetriableConflict
from turnkeeper.application.logs import get_logger
from turnkeeper.application.ports import Clock, UnitOfWork, UnitOfWorkFactory
from turnkeeper.application.ports.audit import DeniedAction
from turnkeeper.application.settings import Settings
from turnkeeper.application.telemetry import TelemetryHub
from turnkeeper.application.tracking import TrackedUnit
from turnkeeper.domain.errors import NotFound

T = TypeVar("T")

#: What reads a unit's answer once it committed (`Transactor.run_then`): it only reads
#: what the COMMIT's round trip brought, so it neither fails nor retries.
Later = Callable[[], Awaitable[T]]


def _now(
    work: Callable[[TrackedUnit], Awaitable[T]],
) -> Callable[[TrackedUnit], Awaitable[Later[T]]]:
    """`work` as `run_then` takes it: its answer, known before the commit."""

    async def answered(uow: TrackedUnit) -> Later[T]:
        result = await work(uow)

        async def known() -> T:
            return result

        return known

    return answered


_log = get_logger("turnkeeper.tx")


class AccessDenied(ApplicationError):
    """An authorization denial, raised by services and audited by the transactor.

    A not_found denial shows no reason at all, so that its answer is identical to the
    one for an unknown id; the audit keeps the reason in `audit_reason`.

    Args:
        code: ``not_found``, ``forbidden`` or ``channel_read_only``.
        reason: the deny reason (audited; shown in 403 answers, never for not_found).
        principal_id: who was denied.
        action: what was refused.
    """

    def __init__(
        self, *, code: str, reason: str, principal_id: uuid.UUID, action: DeniedAction
    ) -> None:
        super().__init__(code, reason=None if code == "not_found" else reason)
        self.code = code
        self.audit_reason = reason
        self.principal_id = principal_id
        self.action = action


class ReadDenied(AccessDenied, NotFound):
    """An `AccessDenied` without read on the target (``not_found``): also a `NotFound`.

    The caller may not learn that the target exists, so a program that catches
    `NotFound` meets this denial as it meets an unknown id, as an HTTP client gets the
    same 404 for both. Raised by `denial` for the code ``not_found``.
    """


def denial(
    *, code: str, reason: str, principal_id: uuid.UUID, action: DeniedAction
) -> AccessDenied:
    """The `AccessDenied` of a refusal: a `ReadDenied` for ``not_found``.

    Args:
        code: ``not_found``, ``forbidden`` or ``channel_read_only``.
        reason: the deny reason (audited).
        principal_id: who was denied.
        action: what was refused.

    Returns:
        The error to raise.
    """
    kind = ReadDenied if code == NotFound.code else AccessDenied
    return kind(code=code, reason=reason, principal_id=principal_id, action=action)


def use_case_name(work: Callable[..., object]) -> str:
    """The span name of a use case: the method that defined its work function.

    Args:
        work: the function handed to `Transactor.run` or `Transactor.read`, usually a
            closure ``work`` inside a service method.

    Returns:
        For example ``AgentSendService.send`` for ``AgentSendService.send.<locals>.work``.
    """
    qualname = getattr(work, "__qualname__", None) or type(work).__qualname__
    return qualname.split(".<locals>", 1)[0]


class Transactor:
    """Runs units of work with retry and denial audit.

    Args:
        uow_factory: opens units of work.
        settings: for ``database.tx_retry_max`` and ``audit.deny_aggregate_window``.
        clock: the time of audit rows.
        telemetry: where spans and committed changes go (a hub without sinks when None).
    """

    def __init__(
        self,
        uow_factory: UnitOfWorkFactory,
        settings: Settings,
        clock: Clock,
        telemetry: TelemetryHub | None = None,
    ) -> None:
        self._uow = uow_factory
        self._settings = settings
        self._audit = DenialAudit(clock, settings)
        self.telemetry = telemetry if telemetry is not None else TelemetryHub()

    async def run(
        self,
        work: Callable[[TrackedUnit], Awaitable[T]],
        *,
        named: Callable[..., object] | None = None,
    ) -> T:
        """Run `work` in a unit of work and commit it.

        Args:
            work: the use case; it may run more than once, so it must do everything
                through the unit it is given (which remembers what it wrote).
            named: the function whose method names the span (`use_case_name`), when
                `work` is defined by a helper of the use case; `work` itself when None.

        Returns:
            What `work` returned in the attempt that committed.

        Raises:
            RetriableConflict: when every retry failed too.
            AccessDenied: after the denial was audited.
            DomainError: whatever the work raised (nothing is stored).
        """
        return await self._spanned(named or work, _now(work))

    async def run_then(
        self,
        work: Callable[[TrackedUnit], Awaitable[Later[T]]],
        *,
        named: Callable[..., object] | None = None,
    ) -> T:
        """`run`, for work whose answer is read after the commit, in the same unit.

        The work returns what reads its answer (a pending read it queued in the unit's
        pipeline, such as `FollowupRepository.start_states`): it is awaited once the
        COMMIT succeeded, before the unit lets its connection go, so that a read queued
        last leaves with the COMMIT instead of waiting on its own.

        Args:
            work: as `run`'s, returning the reader of its answer.
            named: as `run`'s.

        Returns:
            What the reader returned in the attempt that committed.

        Raises:
            RetriableConflict: when every retry failed too.
            AccessDenied: after the denial was audited.
            DomainError: whatever the work raised (nothing is stored).
        """
        return await self._spanned(named or work, work)

    async def _spanned(
        self,
        named: Callable[..., object],
        work: Callable[[TrackedUnit], Awaitable[Later[T]]],
    ) -> T:
        telemetry = self.telemetry
        if not telemetry.records_spans:
            return await self._attempts(work)
        with telemetry.span(use_case_name(named)):
            return await self._attempts(work)

    async def _attempts(self, work: Callable[[TrackedUnit], Awaitable[Later[T]]]) -> T:
        attempt = 0
        telemetry = self.telemetry
        while True:
            try:
                async with self._uow() as uow:
                    tracked = TrackedUnit(uow)
                    later = await work(tracked)
                    await uow.commit()
                    result = await later()
                # Reported only now: the commit succeeded, and an attempt that raised
                # above took its records with it.
                telemetry.committed(tracked.changes)
                return result
            except RetriableConflict as exc:
                if attempt >= self._settings.tx_retry_max:
                    _log.warning("tx_retry_exhausted", attempts=attempt + 1, cause=exc.reason)
                    raise
                attempt += 1
                _log.info("tx_retry", attempt=attempt, cause=exc.reason)
            except AccessDenied as denied:
                await self.record_denial(denied)
                raise

    async def read(self, work: Callable[[UnitOfWork], Awaitable[T]]) -> T:
        """Run a read-only use case in a read-only unit (nothing is committed).

        Args:
            work: the use case; it must not write.

        Returns:
            What `work` returned.

        Raises:
            AccessDenied: after the denial was audited.
            DomainError: whatever the work raised.
        """
        try:
            if not self.telemetry.records_spans:
                async with self._uow.read_only() as uow:
                    return await work(uow)
            with self.telemetry.span(use_case_name(work)):
                async with self._uow.read_only() as uow:
                    return await work(uow)
        except AccessDenied as denied:
            await self.record_denial(denied)
            raise

    async def record_denial(self, denied: AccessDenied) -> None:
        """Count a denial in its aggregated audit row, in a unit of its own.

        Args:
            denied: the denial.
        """
        for _ in range(self._settings.tx_retry_max + 1):
            try:
                async with self._uow() as uow:
                    await self._audit.record(
                        uow, denied.principal_id, denied.action, denied.audit_reason
                    )
                    await uow.commit()
                    return
            except RetriableConflict:
                continue
