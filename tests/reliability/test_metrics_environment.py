"""A one-process ``turnkeeper serve`` keeps its own metrics, whatever the environment says.

prometheus-client reads ``PROMETHEUS_MULTIPROC_DIR`` when it is imported and then writes
every value to files in that directory. An audit set the variable for a one-process
server: its counters went on from the last start, its pool gauge added the stopped
process's pool, the process metrics were gone, and a directory that did not exist made
the start fail with a traceback (exit 1). Only the workers of one server share their
metrics, in a directory of the server's own (ADR 0043).
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.reliability.test_slow_clients import memory_server

#: The parser of the server under test (the environment is the subject, not the parser).
PARSER = "h11"
#: Requests counted before the scrape.
HEALTH_CHECKS = 3


async def test_a_multiprocess_directory_in_the_environment_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = tmp_path / "not-made"
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(shared))
    async with memory_server(tmp_path, PARSER) as url, httpx.AsyncClient() as client:
        before = await _scrape(client, url)
        for _ in range(HEALTH_CHECKS):
            assert (await client.get(f"{url}/healthz")).status_code == 200
        after = await _scrape(client, url)
    healthz = ("turnkeeper_http_requests_total", (("route", "/healthz"), ("status", "200")))
    # The server's start polled /healthz too: counted from the first scrape on.
    assert after[healthz] == before[healthz] + HEALTH_CHECKS
    assert ("process_cpu_seconds_total", ()) in after
    assert not shared.exists()


async def _scrape(
    client: httpx.AsyncClient, url: str
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    scraped = await client.get(f"{url}/metrics")
    assert scraped.status_code == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(scraped.text)
        for sample in family.samples
    }
