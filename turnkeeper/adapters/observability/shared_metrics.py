"""Metrics shared by the worker processes of one server (ADR 0043).

prometheus-client can keep a process's values in files of a directory instead of its
memory, and sum the files of every process at scrape time. The workers of one
``turnkeeper serve --workers N`` do that (`share_process_metrics`, called in each worker
after its fork), so that one scrape through any worker shows the whole server
(`SharedFamilies`); every other process keeps its metrics in memory
(`own_process_metrics`, which every command calls first).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from prometheus_client import CollectorRegistry, values
from prometheus_client.core import Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

#: The environment variable that names the directory of shared metrics (prometheus-client's).
SHARED_DIRECTORY_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"

# The directory `share_process_metrics` was given, once called (a list, so that the
# functions change it without a global statement).
_shared: list[Path] = []


def share_process_metrics(directory: Path) -> None:
    """Have this process's metrics written to `directory`, shared with its siblings.

    Called in each worker process, after its fork and before its metrics are made; the
    `PrometheusMetrics` made afterwards (`attach_metrics`) answer for every process that
    writes to `directory`. It changes prometheus-client for the whole process (its
    environment variable and its value class), so it is for processes that are workers
    of one server and nothing else.

    Args:
        directory: an existing directory, the same for every worker and fresh for each
            server start (a counter in it would otherwise go on from the last start).
    """
    os.environ[SHARED_DIRECTORY_VARIABLE] = str(directory)
    values.ValueClass = values.MultiProcessValue()  # type: ignore[no-untyped-call]
    _shared[:] = [directory]


def own_process_metrics() -> None:
    """Keep this process's metrics in its memory, whatever the environment says.

    prometheus-client reads `SHARED_DIRECTORY_VARIABLE` when it is imported and then
    writes every value to files in that directory: a variable left in a one-process
    server's environment would carry its counts over from earlier starts (or stop the
    start, for a directory that does not exist). The command line calls this first; the
    workers of a server then share theirs (`share_process_metrics`).
    """
    os.environ.pop(SHARED_DIRECTORY_VARIABLE, None)
    values.ValueClass = values.MutexValue
    _shared.clear()


def shared_directory() -> Path | None:
    """The directory this process shares its metrics in (`share_process_metrics`), if any."""
    return _shared[0] if _shared else None


class SharedFamilies(Collector):
    """The workers' summed metrics, and every metric of this one declared.

    Args:
        own: this worker's registry (its metrics' names, help and types).
        directory: the directory of `share_process_metrics`.

    prometheus-client's `MultiProcessCollector` knows only the metrics that have a value
    in the files: one without (no run ended yet) would be missing from the answer,
    where one process declares every metric it has (its help and type, no samples).
    """

    def __init__(self, own: CollectorRegistry, directory: Path) -> None:
        self._own = own
        self._merged = MultiProcessCollector(None, path=str(directory))  # type: ignore[no-untyped-call]

    def collect(self) -> Iterable[Metric]:
        """The summed metrics, then the others of this process without samples."""
        merged: list[Metric] = list(self._merged.collect())  # type: ignore[no-untyped-call]
        yield from merged
        names = {family.name for family in merged}
        for family in self._own.collect():
            if family.name not in names:
                yield Metric(family.name, family.documentation, family.type, family.unit)


__all__ = [
    "SHARED_DIRECTORY_VARIABLE",
    "SharedFamilies",
    "own_process_metrics",
    "share_process_metrics",
    "shared_directory",
]
