"""The agent stream refuses a person with 403 before counting its streams.

A person holding ``stream.max_per_principal`` shared streams who opened the agent
stream was answered 429 rate_limited with a Retry-After, an invitation to retry a
request that can never succeed, instead of 403 (the agent stream is for agents only).
Run on memory and on PostgreSQL.
"""

from __future__ import annotations

import pytest

from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld
from turnkeeper.application.settings import Settings
from turnkeeper.application.transactions import AccessDenied


async def test_a_person_at_the_stream_limit_is_refused_the_agent_stream_with_403(
    services: Services, world: DemoWorld, settings: Settings
) -> None:
    alex = world.principal("alex")
    held = settings.stream_max_per_principal
    streams = [await services.live.open_events(alex) for _ in range(held)]
    try:
        with pytest.raises(AccessDenied) as refused:
            await services.live.open_agent_events(alex)
        assert refused.value.code == "forbidden"
        assert services.live.open_streams == held
    finally:
        for stream in streams:
            await stream.aclose()
    assert services.live.open_streams == 0
