"""The results of the floor table and how they are printed.

Per measurement line: the group, the side, the concurrency, operations per second of
the median round and the spread of the rounds ((highest - lowest) / median), the median
latency, round trips and statements per operation (libpq census; HTTP: the service's),
CPU milliseconds per operation of this process (in-process sides) or of the server
(HTTP), of PostgreSQL (all its processes) and of the load client, and the side's
throughput as a share of the floor (``F1``) measured in the same rounds.

The report after the run: the table of the issue (ops/s and share of the floor at each
concurrency), the cost table (CPU per operation at the middle concurrency and the
throughput the cores allow at that cost), the ratios (service over its one-statement
version, HTTP over in-process, service over the floor) and each side's statement list.
"""

from __future__ import annotations

import collections
import os
import statistics
from collections.abc import Callable, Sequence
from typing import TextIO

import attrs

from bench.cpu import Cpu
from bench.harness import Timing
from bench.suite import compact

MS_PER_SECOND = 1000.0

#: Round trips and statements per operation, by (group, side key).
Census = dict[tuple[str, str], tuple[float, float]]


@attrs.frozen(kw_only=True)
class Measured:
    """The rounds of one side at one concurrency.

    Attributes:
        rounds: every round, in the order run.
        median: the round of median throughput (the lower middle one).
    """

    rounds: list[Timing]
    median: Timing

    @classmethod
    def of(cls, rounds: list[Timing]) -> Measured:
        """The rounds with their median one.

        Args:
            rounds: at least one round.

        Returns:
            The measurement.
        """
        ranked = sorted(rounds, key=lambda t: t.per_second)
        return cls(rounds=rounds, median=ranked[(len(ranked) - 1) // 2])

    @property
    def per_second(self) -> float:
        """Operations per second of the median round."""
        return self.median.per_second

    @property
    def spread(self) -> float:
        """(highest - lowest) / median throughput of the rounds (0 for one round)."""
        rates = [t.per_second for t in self.rounds]
        return (max(rates) - min(rates)) / self.per_second if self.per_second else 0.0

    def cpu_ms(self, pick: Callable[[Cpu], float | None]) -> float | None:
        """Median over the rounds of one process's CPU milliseconds per operation.

        Args:
            pick: the figure of `Cpu` (python, postgres, server or client).

        Returns:
            Milliseconds, or None when not measured.
        """
        values = []
        for timing in self.rounds:
            figure = None if timing.cpu is None else pick(timing.cpu)
            if figure is not None and timing.ops:
                values.append(figure * MS_PER_SECOND / timing.ops)
        return statistics.median(values) if values else None

    def statement_list(self) -> tuple[str, ...]:
        """The most frequent statement list of the median round's operations."""
        if not self.median.statements:
            return ()
        return collections.Counter(self.median.statements).most_common(1)[0][0]


@attrs.frozen(kw_only=True)
class SideResult:
    """One side of a group at one concurrency.

    Attributes:
        key: F1 to F4, floor, service or http.
        label: its name in the table.
        measured: its rounds.
    """

    key: str
    label: str
    measured: Measured


@attrs.frozen(kw_only=True)
class GroupResult:
    """Every side of a group at one concurrency.

    Attributes:
        group: the group's name.
        concurrency: workers per side.
        sides: the sides.
    """

    group: str
    concurrency: int
    sides: list[SideResult]

    def side(self, key: str) -> SideResult | None:
        """The side with a key, if measured."""
        return next((s for s in self.sides if s.key == key), None)

    def ratio(self, key: str, base: str) -> float | None:
        """A side's throughput over another's (None when one is missing or zero).

        Args:
            key: the side.
            base: the side it is compared with (F1: the floor).

        Returns:
            The ratio.
        """
        a, b = self.side(key), self.side(base)
        if a is None or b is None or not b.measured.per_second:
            return None
        return a.measured.per_second / b.measured.per_second


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _count(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}" if abs(value - round(value)) < 0.05 else f"{value:.1f}"


def _census(counts: Census, group: str, key: str) -> tuple[float, float] | None:
    # HTTP requests run the service's statements (same service, token cache warm).
    return counts.get((group, "service" if key == "http" else key))


def _cpu_self(key: str) -> Callable[[Cpu], float | None]:
    """The process that does a side's Python work: the server for HTTP, else this one."""
    if key == "http":
        return lambda cpu: cpu.server
    return lambda cpu: cpu.python


#: The measurement lines' header.
LINE_HEADER = (
    f"{'group':<25} {'side':<40} {'conc':>4} {'ops/s':>7} {'spread':>6} {'p50 ms':>7} "
    f"{'rt/op':>5} {'st/op':>5} {'py ms':>6} {'pg ms':>6} {'cli ms':>6} {'of F1':>5}"
)


def format_side_line(result: GroupResult, counts: Census) -> list[str]:
    """The measurement lines of a group at one concurrency, one per side.

    Args:
        result: the group's result.
        counts: the census.

    Returns:
        The lines.
    """
    lines = []
    for side in result.sides:
        m = side.measured
        census = _census(counts, result.group, side.key)
        share = result.ratio(side.key, "F1")
        lines.append(
            f"{result.group:<25} {side.label[:40]:<40} {result.concurrency:>4} "
            f"{m.per_second:>7.0f} {m.spread * 100:>5.0f}% {m.median.percentile(0.5):>7.2f} "
            f"{_count(census[0] if census else None):>5} "
            f"{_count(census[1] if census else None):>5} "
            f"{_ms(m.cpu_ms(_cpu_self(side.key))):>6} {_ms(m.cpu_ms(lambda c: c.postgres)):>6} "
            f"{_ms(m.cpu_ms(lambda c: c.client)):>6} {'-' if share is None else f'{share:.2f}':>5}"
        )
    return lines


def _row_label(group: str, label: str) -> str:
    return label if group == "floors" else f"{group}: {label}"


def _by_group(results: Sequence[GroupResult]) -> dict[str, list[GroupResult]]:
    grouped: dict[str, list[GroupResult]] = {}
    for result in results:
        grouped.setdefault(result.group, []).append(result)
    return grouped


def _per_concurrency(
    results: Sequence[GroupResult], figure: Callable[[GroupResult], float | None], fmt: str
) -> str:
    return " / ".join("-" if (v := figure(r)) is None else format(v, fmt) for r in results)


def report(results: Sequence[GroupResult], counts: Census, out: TextIO) -> None:
    """Print the floor table's summary after the run.

    Args:
        results: every group at every concurrency.
        counts: the census.
        out: where to print.
    """
    grouped = _by_group(results)
    if not grouped:
        return
    levels = [r.concurrency for r in next(iter(grouped.values()))]
    at = " / ".join(str(c) for c in levels)
    print(
        f"\nagainst the floor (ops/s and share of 'floor: one CTE statement' at {at}; "
        "medians of interleaved rounds):",
        file=out,
    )
    print(f"{'row':<66} {'rt/op':>5} {'st/op':>5}  {'ops/s':<22} share of the floor", file=out)
    for group, rows in grouped.items():
        for side in rows[0].sides:
            if side.key == "F1" and group != "floors":
                continue
            census = _census(counts, group, side.key)

            def rate(r: GroupResult, key: str = side.key) -> float | None:
                found = r.side(key)
                return None if found is None else found.measured.per_second

            def share(r: GroupResult, key: str = side.key) -> float | None:
                return r.ratio(key, "F1")

            rates = _per_concurrency(rows, rate, ".0f")
            shares = _per_concurrency(rows, share, ".2f")
            print(
                f"{_row_label(group, side.label)[:66]:<66} "
                f"{_count(census[0] if census else None):>5} "
                f"{_count(census[1] if census else None):>5}  {rates:<22} {shares}",
                file=out,
            )
    _report_costs(grouped, levels, out)
    _report_statements(grouped, out)


def _total(parts: Sequence[float | None]) -> float | None:
    known = [p for p in parts if p is not None]
    return sum(known) if known else None


def _report_costs(grouped: dict[str, list[GroupResult]], levels: list[int], out: TextIO) -> None:
    middle = levels[len(levels) // 2]
    cores = os.cpu_count() or 1
    print(
        f"\ncost per operation at concurrency {middle} (CPU ms; py: this process in-process,"
        f" the server over HTTP; pg: all PostgreSQL processes; cli: the load client;"
        f" ceiling: the ops/s {cores} cores allow at that total, where CPU binds):",
        file=out,
    )
    print(
        f"{'row':<66} {'py ms':>6} {'pg ms':>6} {'cli ms':>6} {'total':>6} {'ceiling':>7}"
        f" {'ops/s':>6}",
        file=out,
    )
    for group, rows in grouped.items():
        row = next((r for r in rows if r.concurrency == middle), rows[-1])
        for side in row.sides:
            if side.key == "F1" and group != "floors":
                continue
            m = side.measured
            parts = [
                m.cpu_ms(_cpu_self(side.key)),
                m.cpu_ms(lambda c: c.postgres),
                m.cpu_ms(lambda c: c.client),
            ]
            total = _total(parts)
            ceiling = "-" if not total else f"{cores * MS_PER_SECOND / total:.0f}"
            print(
                f"{_row_label(group, side.label)[:66]:<66} "
                + " ".join(f"{_ms(p):>6}" for p in (*parts, total))
                + f" {ceiling:>7} {m.per_second:>6.0f}",
                file=out,
            )
    at = " / ".join(str(c) for c in levels)
    print(f"\nratios at {at}:", file=out)
    print(
        f"{'operation':<25} {'service / one statement':<24} {'HTTP / service':<20}"
        " service / floor (F1)",
        file=out,
    )
    for group, rows in grouped.items():
        if group == "floors":
            continue
        print(
            f"{group:<25} "
            f"{_per_concurrency(rows, lambda r: r.ratio('service', 'floor'), '.2f'):<24} "
            f"{_per_concurrency(rows, lambda r: r.ratio('http', 'service'), '.2f'):<20} "
            f"{_per_concurrency(rows, lambda r: r.ratio('service', 'F1'), '.2f')}",
            file=out,
        )


def _report_statements(grouped: dict[str, list[GroupResult]], out: TextIO) -> None:
    print("\nstatements per operation (lowest concurrency; traced by name):", file=out)
    for group, rows in grouped.items():
        for side in rows[0].sides:
            if side.key == "http" or (side.key == "F1" and group != "floors"):
                continue
            names = side.measured.statement_list()
            print(f"  {_row_label(group, side.label)}: {compact(names) or '-'}", file=out)


__all__ = [
    "LINE_HEADER",
    "Census",
    "GroupResult",
    "Measured",
    "SideResult",
    "format_side_line",
    "report",
]
