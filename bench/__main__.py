"""``python -m bench [--quick] [name ...] | --scale | --freshness | --profile [name ...]``.

- no option: the full suite (`bench.suite`), one table, a few minutes on two cores;
- ``name ...``: only the operations whose name contains one of the names (``finish``
  measures the four finish rows), at the full size or with ``--quick``;
- ``--quick``: the suite at a tiny size (what the smoke test runs);
- ``--scale``: the growth run (`bench.scale`): 10k threads and 1M messages loaded with
  COPY, then send, history read, event poll and run finish against the small tables;
- ``--freshness``: the older freshness-gate benchmark (`bench.freshness`);
- ``--profile [name ...]``: pyinstrument profiles of the service and HTTP sides of the
  operations whose name contains one of the names (all without a name), `bench.profile`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import platform
import sys
from collections.abc import Sequence
from typing import TextIO

import structlog

from bench import freshness, scale
from bench.harness import bench_server, scratch_database, server_version
from bench.operations import OPERATIONS
from bench.suite import FULL, HEADER, QUICK, format_row, report_details, run_suite

_OPTIONS = ("--quick", "--scale", "--freshness", "--profile")
_USAGE = (
    "usage: python -m bench [--quick] [name ...] | --scale | --freshness | --profile [name ...]"
)


def _machine() -> str:
    memory = "?"
    try:
        with open("/proc/meminfo", encoding="ascii") as info:
            total_kib = int(info.readline().split()[1])
        memory = f"{total_kib / 1024 / 1024:.1f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return (
        f"{os.cpu_count()} cpus, {memory} memory, Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}"
    )


async def main_async(argv: Sequence[str], out: TextIO) -> int:
    """Run the benchmarks from the command line.

    Args:
        argv: the arguments.
        out: where to print.

    Returns:
        The exit code.
    """
    profile_names = list(argv[1:]) if argv[:1] == ["--profile"] else None
    names = [a for a in argv if not a.startswith("--")]
    flags = [a for a in argv if a.startswith("--")]
    operations = tuple(o for o in OPERATIONS if not names or any(n in o.name for n in names))
    understood = all(f in _OPTIONS for f in flags) and (
        len(flags) <= 1 and (not names or flags in ([], ["--quick"])) and bool(operations)
    )
    if profile_names is None and not understood:
        print(f"{_USAGE} (not understood: {' '.join(argv)})", file=sys.stderr)
        return 2
    if "--freshness" in argv:
        return await freshness.main_async([], out)
    # One record per operation would swamp the report: only warnings and errors here.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    async with bench_server() as server, scratch_database(server.conninfo) as conninfo:
        version = await server_version(conninfo)
        print(f"machine: {_machine()}; {version} ({server.where})", file=out)
        if profile_names is not None:
            # Imported here: pyinstrument is a development dependency of the profile only.
            from bench.profile import run_profile

            await run_profile(conninfo, profile_names, out)
            return 0
        if "--scale" in argv:
            await scale.run_scale(conninfo, out, data_dir=server.data_dir)
            return 0
        size = QUICK if "--quick" in argv else FULL
        print(LEGEND, file=out)
        print(HEADER, file=out, flush=True)
        rows = await run_suite(
            conninfo,
            size,
            data_dir=server.data_dir,
            operations=operations,
            on_row=lambda row: print(format_row(row), file=out, flush=True),
        )
    report_details(rows, out)
    return 0


#: What the columns of the table mean.
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
    return asyncio.run(main_async(list(sys.argv[1:] if argv is None else argv), sys.stdout))


if __name__ == "__main__":
    raise SystemExit(main())
