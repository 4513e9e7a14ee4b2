"""``python -m bench [--quick] [--floor|--suite] [name ...] | --scale | --freshness | ...``.

(and ``--event-log``.)

- no option: the floor table (`bench.against_floor`: every hot operation against an
  independent floor, in-process and over HTTP against a real ``turnkeeper serve``),
  then the same-statements table (`bench.suite`: service against a raw psycopg loop of
  its own statements, and the Litestar app in-process); a quarter of an hour on two
  idle cores;
- ``--floor`` or ``--suite``: only one of the two tables; ``name ...`` only the floor
  groups and suite operations whose name contains one of the names (to measure a few
  rows again, for example when the machine was busy, or ``--suite steer``);
- ``--live [--quick]``: the live delivery benchmark (`bench.live`);
- ``--quick``: the same at a tiny size (what the smoke test runs);
- ``--scale``: the growth run (`bench.scale`): 10k threads and 1M messages loaded with
  COPY, then send, history read, event poll and run finish against the small tables;
- ``--freshness``: the older freshness-gate benchmark (`bench.freshness`);
- ``--event-log [--quick]``: the event log's ordering rule against no rule, the old
  counter row and a NOTIFY per commit, reader lag under load, the watch's cost
  (`bench.event_log`);
- ``--profile [name ...]``: pyinstrument profiles of the service and HTTP sides of the
  operations whose name contains one of the names (all without a name), `bench.profile`.
"""

from __future__ import annotations

import logging
import os
import platform
import sys
from collections.abc import Sequence
from typing import TextIO

import structlog

from bench import against_floor, event_log, freshness, scale
from bench import live as bench_live
from bench.floor_report import LINE_HEADER
from bench.floor_report import report as floor_report
from bench.harness import (
    BENCH_DATABASE_PREFIX,
    Settle,
    bench_server,
    run_stoppable,
    server_version,
    settle_as_serve,
)
from bench.operations import OPERATIONS
from bench.suite import FULL, HEADER, QUICK, format_row, report_details, run_suite
from turnkeeper.adapters.postgres.databases import scratch_database

_ALONE = ("--scale", "--freshness", "--profile")
_TABLES = ("--floor", "--suite")
_USAGE = (
    "usage: python -m bench [--quick] [--floor | --suite] [name ...] | --scale | --freshness"
    " | --live [--quick] | --event-log [--quick] | --profile [name ...]"
)


def _names(argv: Sequence[str]) -> list[str]:
    return [a for a in argv if not a.startswith("--")]


def _understood(argv: Sequence[str]) -> bool:
    if argv[:1] in (["--live"], ["--event-log"]):
        return argv[1:] in ([], ["--quick"])
    if argv[:1] and argv[0] in _ALONE:
        return argv[0] == "--profile" or len(argv) == 1
    names = _names(argv)
    tables = [a for a in argv if a in _TABLES]
    rest = [a for a in argv if a not in _TABLES and a != "--quick" and a not in names]
    return not rest and len(tables) <= 1 and argv.count("--quick") <= 1


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f}"


def interpreter(maps: str = "/proc/self/maps") -> str:
    """Which Python build runs the benchmark: its version, installation and libpython.

    The build moves every figure: on the benchmark machine the same tree took about a
    tenth less server CPU per message on Debian's interpreter (libpython linked in) than
    on a default pyenv build (libpython shared; docs/operations.md, "The Python
    interpreter"), so the figures name it.

    Args:
        maps: the memory map of this process (Linux); unreadable: libpython unknown.

    Returns:
        For example ``Python 3.11.7 at /usr, libpython linked in``.
    """
    try:
        with open(maps, encoding="utf-8", errors="replace") as mapped:
            shared = any("/libpython" in line for line in mapped)
        linkage = "libpython shared" if shared else "libpython linked in"
    except OSError:
        linkage = "libpython unknown"
    return f"Python {platform.python_version()} at {sys.base_prefix}, {linkage}"


def _machine() -> str:
    memory = "?"
    try:
        with open("/proc/meminfo", encoding="ascii") as info:
            total_kib = int(info.readline().split()[1])
        memory = f"{total_kib / 1024 / 1024:.1f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return (
        f"{os.cpu_count()} cpus, {memory} memory, {interpreter()}, "
        f"{platform.system()} {platform.release()}"
    )


async def main_async(argv: Sequence[str], out: TextIO, *, settle: Settle | None = None) -> int:
    """Run the benchmarks from the command line.

    Args:
        argv: the arguments.
        out: where to print.
        settle: passed to the floor table (`bench.against_floor.run_floor_suite`); the
            command line passes `bench.harness.settle_as_serve`.

    Returns:
        The exit code.
    """
    profile_names = list(argv[1:]) if argv[:1] == ["--profile"] else None
    if not _understood(argv):
        print(f"{_USAGE} (not understood: {' '.join(argv)})", file=sys.stderr)
        return 2
    if "--freshness" in argv:
        return await freshness.main_async([], out)
    # One record per operation would swamp the report: only warnings and errors here.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    async with (
        bench_server() as server,
        scratch_database(server.conninfo, prefix=BENCH_DATABASE_PREFIX) as conninfo,
    ):
        version = await server_version(conninfo)
        print(f"machine: {_machine()}; {version} ({server.where})", file=out)
        if profile_names is not None:
            # Imported here: pyinstrument is a development dependency of the profile only.
            from bench.profile import run_profile

            await run_profile(conninfo, profile_names, out)
            return 0
        if argv[:1] == ["--live"]:
            return await bench_live.main_async(conninfo, "--quick" in argv, out)
        if argv[:1] == ["--event-log"]:
            await event_log.run_event_log(conninfo, out, quick="--quick" in argv)
            return 0
        if "--scale" in argv:
            await scale.run_scale(conninfo, out, data_dir=server.data_dir)
            return 0
        quick = "--quick" in argv
        names = _names(argv)
        if "--suite" not in argv:
            print(f"\n{_load()}\n{FLOOR_LEGEND}\n{LINE_HEADER}", file=out, flush=True)
            results, counts = await against_floor.run_floor_suite(
                conninfo,
                against_floor.QUICK if quick else against_floor.FULL,
                groups=tuple(
                    g for g in against_floor.GROUPS if not names or any(n in g.name for n in names)
                ),
                out=out,
                settle=settle,
            )
            floor_report(results, counts, out)
            print(_load(), file=out, flush=True)
        if "--floor" not in argv:
            # Its own database: each table builds its world (and owner) from scratch.
            async with scratch_database(
                server.conninfo, prefix=BENCH_DATABASE_PREFIX
            ) as suite_conninfo:
                print(f"\n{_load()}\n{LEGEND}\n{HEADER}", file=out, flush=True)
                rows = await run_suite(
                    suite_conninfo,
                    QUICK if quick else FULL,
                    data_dir=server.data_dir,
                    operations=tuple(
                        o for o in OPERATIONS if not names or any(n in o.name for n in names)
                    ),
                    on_row=lambda row: print(format_row(row), file=out, flush=True),
                )
            report_details(rows, out)
            print(_load(), file=out, flush=True)
    return 0


#: What the columns of the floor table mean.
FLOOR_LEGEND = (
    "floor table: ops/s of all workers (median round), spread of the rounds, p50 latency;"
    " rt/op and st/op: round trips and statements per operation (libpq trace; BEGIN and"
    " COMMIT included; HTTP: the service's); py ms: CPU per operation of this process"
    " (HTTP: of the server); pg ms: of all PostgreSQL processes; cli ms: of the load"
    " client; of F1: throughput over 'floor: one CTE statement' of the same rounds"
)
#: What the columns of the same-statements table mean.
LEGEND = (
    "ops/s of all workers; p50/p99: service latency; svc/raw: service vs raw psycopg loop;"
    " http/svc: Litestar in-process vs service; stmts: statements per operation"
    " (COMMIT excluded); tx: transactions; pg MiB: PSS of all PostgreSQL processes;"
    " py MiB: RSS of this process"
)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m bench``.

    Args:
        argv: the arguments; ``sys.argv[1:]`` when None.

    Returns:
        The exit code.
    """
    arguments = list(sys.argv[1:] if argv is None else argv)
    return run_stoppable(main_async(arguments, sys.stdout, settle=settle_as_serve))


if __name__ == "__main__":
    raise SystemExit(main())
