"""Run defects of issue 16 item 8 over HTTP (the services' scenarios: test_run_defects.py).

- GET /v1/runs/{id}, the cancel answer and the 409 ``current`` of a run patch list for
  each reader only the follow-ups whose messages it may see; the run's agent sees all.
- POST /v1/runs/{id}/resume with the consumed start token answers 403
  ``invocation_token_invalid`` (``superseded``) when no follow-up was delivered.
- GET /v1/agent/events answers the deliverable invocation on its first page, past the
  invocations of cancelled runs that fill more than a page.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.support.http import HttpWorld, http_world

#: Cancelled runs whose invocations fill the agent's feed before the deliverable one.
ENDED_RUNS = 3


@pytest.fixture
async def web() -> AsyncIterator[HttpWorld]:
    """A fresh memory world behind the application."""
    async with http_world() as world:
        yield world


async def _followups(web: HttpWorld) -> tuple[str, str, str]:
    """Alex's started run with a public follow-up and one to Lotse only.

    Returns:
        The run id, the public follow-up's id and the restricted one's.
    """
    run_id, token = await web.trigger()
    lotse = web.headers("lotse")
    started = await web.client.post(
        f"/v1/runs/{run_id}/start", json={"invocation_token": token}, headers=lotse
    )
    assert started.status_code == 200
    thread = web.main_thread("allgemein")
    ids = []
    for cid, restricted in (("public", None), ("secret", [str(web.world.principal("lotse").id)])):
        body: dict[str, object] = {"client_msg_id": cid, "content": f"{cid} note"}
        if restricted is not None:
            body["restricted_to"] = restricted
        posted = await web.client.post(
            f"/v1/threads/{thread}/messages", json=body, headers=web.headers("alex")
        )
        assert posted.status_code == 201, posted.text
        ids.append(str(posted.json()["id"]))
    document = (await web.client.get(f"/v1/runs/{run_id}", headers=lotse)).json()
    assert set(document["followups"]) == set(ids)  # both are follow-ups of the run
    return run_id, ids[0], ids[1]


async def test_get_shows_each_reader_what_it_may_see(web: HttpWorld) -> None:
    run_id, public, secret = await _followups(web)

    async def shown(handle: str) -> set[str]:
        answer = await web.client.get(f"/v1/runs/{run_id}", headers=web.headers(handle))
        assert answer.status_code == 200
        return set(answer.json()["followups"])

    assert await shown("lotse") == {public, secret}
    assert await shown("alex") == {public, secret}  # the author
    assert await shown("sam") == {public}  # a reader of the thread
    assert await shown("robin") == {public}  # the owner is no member of the audience
    sam_view = await web.client.get(f"/v1/runs/{run_id}", headers=web.headers("sam"))
    assert secret not in sam_view.text


async def test_cancel_answer_and_patch_conflict(web: HttpWorld) -> None:
    run_id, public, secret = await _followups(web)
    conflict = await web.client.request(
        "PATCH",
        f"/v1/runs/{run_id}",
        json={"base_version": 1, "ops": []},
        headers=web.headers("lotse"),
    )
    assert (conflict.status_code, conflict.json()["code"]) == (409, "base_version_conflict")
    assert set(conflict.json()["current"]["followups"]) == {public, secret}

    cancelled = await web.client.post(f"/v1/runs/{run_id}/cancel", headers=web.headers("robin"))
    assert cancelled.status_code == 200
    assert cancelled.json()["cancel_requested"] is True
    assert set(cancelled.json()["followups"]) == {public}
    assert secret not in cancelled.text


async def test_the_start_token_does_not_resume(web: HttpWorld) -> None:
    run_id, token = await web.trigger()
    lotse = web.headers("lotse")
    started = await web.client.post(
        f"/v1/runs/{run_id}/start", json={"invocation_token": token}, headers=lotse
    )
    assert started.status_code == 200
    waiting = await web.client.post(f"/v1/runs/{run_id}/await-input", json={}, headers=lotse)
    assert waiting.json()["state"] == "waiting_input"

    refused = await web.client.post(
        f"/v1/runs/{run_id}/resume", json={"invocation_token": token}, headers=lotse
    )

    assert refused.status_code == 403
    problem = refused.json()
    assert (problem["code"], problem["reason"]) == ("invocation_token_invalid", "superseded")
    assert token not in refused.text
    after = await web.client.get(f"/v1/runs/{run_id}", headers=lotse)
    assert (after.json()["state"], after.json()["version"]) == ("waiting_input", 3)


async def test_agent_feed_page_past_undeliverable_events(web: HttpWorld) -> None:
    alex = web.headers("alex")
    ended = []
    for n in range(ENDED_RUNS):
        run_id, _ = await web.trigger(cid=f"ended-{n}")
        cancelled = await web.client.post(f"/v1/runs/{run_id}/cancel", headers=alex)
        assert cancelled.json()["state"] == "cancelled"
        ended.append(run_id)
    thread = web.main_thread("allgemein")
    posted = await web.client.post(
        f"/v1/threads/{thread}/messages",
        json={"client_msg_id": "wanted", "content": "and now?"},
        headers=alex,
    )
    assert posted.status_code == 201

    page = await web.client.get(
        "/v1/agent/events", params={"after": 0, "limit": 2}, headers=web.headers("lotse")
    )

    assert page.status_code == 200
    invoked = [e for e in page.json()["events"] if e["type"] == "agent.invocation"]
    assert [e["payload"]["message_id"] for e in invoked] == [posted.json()["id"]]
    assert not {e["payload"]["run_id"] for e in invoked} & set(ended)
