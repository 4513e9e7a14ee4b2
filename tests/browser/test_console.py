"""The live console in headless Chromium against a served turnkeeper (issue 21).

Each test serves the memory store with the demo world on a loopback port, drives the
people and the agent over the public HTTP API, and checks that the page shows every
change within `LIVE_MS` without a reload. Screenshots go to build/console-screenshots/.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import structlog

from tests.browser.support import (
    LIVE_MS,
    PHONE,
    RECONNECT_MS,
    SCREENSHOTS,
    WIDE,
    CuttingProxy,
    ServedWorld,
    message,
    open_thread,
    run_box,
    sign_in,
)

if TYPE_CHECKING:
    from playwright.async_api import BrowserContext, Page, Request

#: A value the page sets once; still there at the end means the page never reloaded.
MARKER = "window.__consoleTestMarker"
#: The thread id of the focused thread button, or null.
FOCUSED_THREAD = "document.activeElement && document.activeElement.dataset.threadId || null"
#: Tab presses that must reach the first thread from the top of the page.
TAB_BOUND = 12
#: The path of one thread's read (GET /v1/threads/{id}), not of its messages.
THREAD_READ = re.compile(r"^/v1/threads/([0-9a-f-]{36})$")


def _record_requests(page: Page) -> list[Request]:
    seen: list[Request] = []

    def record(request: Request) -> None:
        seen.append(request)

    page.on("request", record)
    return seen


async def _no_horizontal_scroll(page: Page) -> None:
    overflow = await page.evaluate(
        "document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert overflow <= 0


async def test_a_run_is_followed_live_from_post_to_finish(
    served: ServedWorld, context: BrowserContext
) -> None:
    from playwright.async_api import expect

    page = await context.new_page()
    requests = _record_requests(page)
    thread = served.main_thread("allgemein")
    alex = served.token("alex")
    with structlog.testing.capture_logs() as logs:
        await sign_in(page, served.url, alex)
        await page.evaluate(f"{MARKER} = 1")
        await open_thread(page, thread)
        await served.call(
            "lotse", "PUT", "/v1/agent/heartbeat", {"capabilities": {"followups": "queue"}}
        )

        # Alex posts with the keyboard; the free-response operator's run opens.
        await page.locator("#message-input").fill("Can someone check invoice 7, please?")
        await page.locator("#message-input").press("Control+Enter")
        posted = message(page, "invoice 7")
        await expect(posted).to_have_attribute("data-trigger-state", "received", timeout=LIVE_MS)
        run_id = await page.locator("section.run").first.get_attribute("data-run-id")
        assert run_id is not None
        box = run_box(page, run_id)
        await expect(box).to_have_attribute("data-run-state", "queued", timeout=LIVE_MS)
        await expect(box).to_contain_text("@lotse")
        await expect(box.locator(".ref")).to_contain_text("invoice 7")

        # The agent (the test over HTTP) starts the run.
        token = await served.invocation("lotse", run_id)
        await served.call("lotse", "POST", f"/v1/runs/{run_id}/start", {"invocation_token": token})
        await expect(box).to_have_attribute("data-run-state", "running", timeout=LIVE_MS)
        await expect(posted).to_have_attribute("data-trigger-state", "working", timeout=LIVE_MS)

        # A follow-up arrives from Alex's other device.
        follow = await served.post("alex", thread, "Invoice 8 as well.")
        followup = box.locator(f'[data-followup-id="{follow["id"]}"]')
        await expect(followup).to_have_attribute("data-followup-state", "queued", timeout=LIVE_MS)
        await expect(message(page, "Invoice 8")).to_have_attribute(
            "data-trigger-state", "received", timeout=LIVE_MS
        )

        # The agent takes the follow-up, answers and finishes.
        run = await served.call("lotse", "GET", f"/v1/runs/{run_id}")
        ops = [{"op": "replace", "path": f"/followups/{follow['id']}/state", "value": "delivered"}]
        await served.call(
            "lotse", "PATCH", f"/v1/runs/{run_id}", {"base_version": run["version"], "ops": ops}
        )
        await expect(followup).to_have_attribute(
            "data-followup-state", "delivered", timeout=LIVE_MS
        )
        await expect(message(page, "Invoice 8")).to_have_attribute(
            "data-trigger-state", "followup_delivered", timeout=LIVE_MS
        )
        await _screenshots(page, "live")
        await served.agent_send("lotse", thread, run_id, "Both invoices are paid, Alex.")
        answer = message(page, "Both invoices are paid")
        await expect(answer.locator(".origin.badge")).to_have_text("agent", timeout=LIVE_MS)
        run = await served.call("lotse", "GET", f"/v1/runs/{run_id}")
        ops[0]["value"] = "absorbed"
        await served.call(
            "lotse", "PATCH", f"/v1/runs/{run_id}", {"base_version": run["version"], "ops": ops}
        )
        await expect(followup).to_have_attribute("data-followup-state", "absorbed", timeout=LIVE_MS)
        await served.call("lotse", "POST", f"/v1/runs/{run_id}/finish", {"state": "completed"})
        await expect(box).to_have_attribute("data-run-state", "completed", timeout=LIVE_MS)
        await expect(posted).to_have_attribute("data-trigger-state", "done", timeout=LIVE_MS)
        await expect(box.locator(".cancel-run")).to_have_count(0)
        await expect(page.locator("section.run")).to_have_count(1)
        await expect(posted.locator(".trigger")).to_have_attribute("title", "Trigger state: done")

        assert await page.evaluate(MARKER) == 1
        await _screenshots(page, "run")
    # The token travels in a header only: never in an address, never in a log.
    assert requests
    assert all(alex not in request.url for request in requests)
    assert any(entry.get("event") == "http_request" for entry in logs)
    assert alex not in repr(logs)
    stored = await page.evaluate("sessionStorage.getItem('turnkeeper.console.token')")
    assert stored == alex


async def _screenshots(page: Page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    await _no_horizontal_scroll(page)
    wide = SCREENSHOTS / f"console-{name}-1400x1000.png"
    await page.screenshot(path=str(wide))
    await page.set_viewport_size(PHONE)  # type: ignore[arg-type]
    await _no_horizontal_scroll(page)
    phone = SCREENSHOTS / f"console-{name}-375.png"
    await page.screenshot(path=str(phone), full_page=True)
    await page.set_viewport_size(WIDE)  # type: ignore[arg-type]
    for shot in (wide, phone):
        assert shot.read_bytes().startswith(b"\x89PNG")


async def test_actions_cancel_a_run_close_a_thread_and_mention(
    served: ServedWorld, context: BrowserContext
) -> None:
    from playwright.async_api import expect

    page = await context.new_page()
    thread = served.main_thread("eskalation")
    await sign_in(page, served.url, served.token("alex"))
    await open_thread(page, thread)

    # A mention by id: Eskalation answers only when its operator is mentioned.
    lotse = served.id_of("lotse")
    await page.locator("#message-input").fill(f"@{lotse} the export hangs")
    await page.locator("#composer button[type=submit]").press("Enter")
    await expect(page.locator("#composer-status")).to_contain_text("Posted #1", timeout=LIVE_MS)
    box = page.locator("section.run").first
    await expect(box).to_have_attribute("data-run-state", "queued", timeout=LIVE_MS)

    # Cancel with the keyboard: a queued run ends at once.
    await box.locator(".cancel-run").focus()
    await page.keyboard.press("Enter")
    await expect(box).to_have_attribute("data-run-state", "cancelled", timeout=LIVE_MS)
    await expect(box.locator("[data-end-reason]")).to_have_text("user_cancelled")
    await expect(message(page, "the export hangs")).to_have_attribute(
        "data-trigger-state", "cancelled", timeout=LIVE_MS
    )

    # A mention the channel refuses shows the reason on hover and to screen readers.
    assistent = served.id_of("assistent")
    await page.locator("#message-input").fill(f"@{assistent} can you?")
    await page.locator("#message-input").press("Control+Enter")
    refused = message(page, "can you?").locator(".trigger")
    await expect(refused).to_have_attribute("data-trigger-state", "failed", timeout=LIVE_MS)
    await expect(refused).to_have_attribute(
        "title", "Trigger state: failed, reason: agent_not_allowed_here"
    )
    await expect(refused).to_have_attribute(
        "aria-label", "Trigger state: failed, reason: agent_not_allowed_here"
    )

    # A restricted message is marked as such.
    await served.post(
        "alex", thread, "Only for Lotse: the key is in the vault.", restricted_to=[lotse]
    )
    restricted = message(page, "the key is in the vault").locator("[data-restricted]")
    await expect(restricted).to_have_attribute(
        "aria-label", "Restricted: visible only to @lotse, @alex", timeout=LIVE_MS
    )

    # Close the thread; a mention by handle (Lotse wrote the run anchor) reopens it.
    await page.locator("#close-thread").click()
    await expect(page.locator("#thread-meta [data-thread-state]")).to_have_text(
        "done", timeout=LIVE_MS
    )
    await page.locator("#message-input").fill("@lotse one more question")
    await page.locator("#message-input").press("Control+Enter")
    await expect(page.locator("#thread-meta [data-thread-state]")).to_have_text(
        "open", timeout=LIVE_MS
    )
    page_of = await served.call("alex", "GET", f"/v1/threads/{thread}/messages?after_seq=0")
    last = [m for m in page_of["messages"] if m["content"] == "@lotse one more question"]
    assert [m["mentions"] for m in last] == [[lotse]]
    await expect(message(page, "thread.reopened").locator(".origin.badge")).to_have_text("system")
    await _screenshots(page, "actions")


async def test_the_stream_reconnects_with_last_event_id_and_loses_nothing(
    served: ServedWorld, context: BrowserContext
) -> None:
    from playwright.async_api import expect

    port = int(served.url.rsplit(":", 1)[1])
    thread = served.main_thread("allgemein")
    async with CuttingProxy(port) as proxy:
        page = await context.new_page()
        streams: list[Request] = []
        page.on("request", lambda r: streams.append(r) if "/v1/events/stream" in r.url else None)
        await sign_in(page, f"http://127.0.0.1:{proxy.port}", served.token("alex"))
        await open_thread(page, thread)
        first = await served.post("alex", thread, "Before the cut.")
        await expect(message(page, "Before the cut.")).to_be_visible(timeout=LIVE_MS)

        proxy.refusing = True
        proxy.cut()
        await expect(page.locator("#live-status")).to_have_attribute(
            "data-state", "reconnecting", timeout=RECONNECT_MS
        )
        missed = await served.post("alex", thread, "While the stream was down.")
        proxy.refusing = False

        await expect(page.locator("#live-status")).to_have_attribute(
            "data-state", "live", timeout=RECONNECT_MS
        )
        await expect(message(page, "While the stream was down.")).to_be_visible(timeout=LIVE_MS)
        await expect(message(page, "Before the cut.")).to_have_count(1)
        cursors = [(await r.all_headers()).get("last-event-id") for r in streams]
        assert len(cursors) >= 2
        assert all(cursor is not None for cursor in cursors)
        # The resumed stream starts after the last event the page had, before the missed one.
        resumed = int(cursors[-1] or 0)
        assert await _event_seq(served, first) <= resumed < await _event_seq(served, missed)
        assert all("after=" not in r.url for r in streams)


async def _event_seq(served: ServedWorld, posted: Any) -> int:
    page = await served.call("alex", "GET", "/v1/events?after=0")
    seqs = [
        e["seq"]
        for e in page["events"]
        if e["type"] == "message.created" and e["resource"]["id"] == posted["id"]
    ]
    assert len(seqs) == 1
    return int(seqs[0])


async def test_the_owner_sees_every_space_and_the_held_sends_note(
    served: ServedWorld, context: BrowserContext
) -> None:
    from playwright.async_api import expect

    await served.post("alex", served.main_thread("allgemein"), "Hello Support.")
    await served.post("sam", served.main_thread("kampagnen"), "Hello Marketing.")
    page = await context.new_page()
    await sign_in(page, served.url, served.world.owner.token)
    await expect(page.locator("#thread-tree .space")).to_have_count(2)
    # The keyboard reaches the first thread with Tab alone and opens it with Enter.
    for _ in range(TAB_BOUND):
        await page.keyboard.press("Tab")
        if await page.evaluate(FOCUSED_THREAD):
            break
    first = await page.evaluate(FOCUSED_THREAD)
    assert first is not None
    await page.keyboard.press("Enter")
    await expect(message(page, "Hello Support.")).to_be_visible()
    # A live change redraws the list but leaves the focus where it was.
    await page.locator(f'[data-thread-id="{first}"]').focus()
    await served.post("alex", served.main_thread("allgemein"), "Hello again.")
    await expect(message(page, "Hello again.")).to_be_visible(timeout=LIVE_MS)
    assert await page.evaluate(FOCUSED_THREAD) == first
    await expect(page.locator("#held summary")).to_have_text("Held agent sends")
    await page.locator("#held summary").click()
    await expect(page.locator("#held")).to_contain_text("only the owner's token reads")
    # Sam reads only Allgemein in Support and all of Marketing: both threads, no others.
    sam = await context.new_page()
    await sign_in(sam, served.url, served.token("sam"))
    await expect(sam.locator("#thread-tree .thread-link")).to_have_count(2)


async def _new_thread(served: ServedWorld, who: str, channel: str, title: str) -> str:
    channel_id = served.world.channels[channel].id
    body = {"title": title, "first_message": {"client_msg_id": title, "content": title + "?"}}
    created = await served.call(who, "POST", f"/v1/channels/{channel_id}/threads", body)
    return str(created["thread"]["id"])


async def test_the_thread_list_grows_live_grouped_by_space_and_channel(
    served: ServedWorld, context: BrowserContext
) -> None:
    from playwright.async_api import expect

    page = await context.new_page()
    await sign_in(page, served.url, served.token("sam"))
    await expect(page.locator("#thread-tree")).to_contain_text("No readable events yet.")
    # Alex's thread in Support/Reports first: Sam may not read it.
    hidden = await _new_thread(served, "alex", "reports", "Quarterly report")
    shown = await _new_thread(served, "sam", "ideas", "Spring launch")
    link = page.locator(f'[data-thread-id="{shown}"]')
    await expect(link.locator(".thread-name")).to_have_text("Spring launch", timeout=LIVE_MS)
    await expect(link.locator(".badge")).to_have_text("open")
    heads = await link.evaluate(
        "(button) => [button.closest('section.space').querySelector('h3').textContent,"
        " button.closest('ul').previousElementSibling.textContent]"
    )
    space, channel = served.world.spaces["marketing"].id, served.world.channels["ideas"].id
    # No names for readers in the API: the groups show the ends of their ids.
    assert heads == [f"Space {str(space)[-8:]}", f"Channel {str(channel)[-8:]}"]
    await expect(page.locator(f'[data-thread-id="{hidden}"]')).to_have_count(0)
    await expect(page.locator("#thread-tree .thread-link")).to_have_count(1)


def _thread_reads(page: Page) -> list[str]:
    """The thread ids the page reads with GET /v1/threads/{id}, in order."""
    reads: list[str] = []

    def record(request: Request) -> None:
        found = THREAD_READ.match(urlsplit(request.url).path)
        if request.method == "GET" and found:
            reads.append(found.group(1))

    page.on("request", record)
    return reads


async def test_main_threads_are_listed_by_their_titles_each_read_once(
    served: ServedWorld, context: BrowserContext
) -> None:
    from playwright.async_api import expect

    allgemein, kampagnen = served.main_thread("allgemein"), served.main_thread("kampagnen")
    await served.post("alex", allgemein, "Hello Support.")
    page = await context.new_page()
    reads = _thread_reads(page)
    await sign_in(page, served.url, served.token("sam"))
    # A main thread has no thread.created: its title comes from reading the thread.
    listed = page.locator(f'[data-thread-id="{allgemein}"]')
    await expect(listed.locator(".thread-name")).to_have_text("Allgemein", timeout=LIVE_MS)
    await expect(listed.locator(".badge")).to_have_text("open")
    # A main thread that gets its first event while the page is open, too.
    await served.post("sam", kampagnen, "Hello Marketing.")
    live = page.locator(f'[data-thread-id="{kampagnen}"]')
    await expect(live.locator(".thread-name")).to_have_text("Kampagnen", timeout=LIVE_MS)
    # More events of the same threads read nothing again; a new thread brings its own.
    await served.post("alex", allgemein, "Hello again.")
    await served.post("sam", kampagnen, "Hello again, Marketing.")
    created = await _new_thread(served, "sam", "kampagnen", "Summer launch")
    await expect(page.locator(f'[data-thread-id="{created}"] .thread-name')).to_have_text(
        "Summer launch", timeout=LIVE_MS
    )
    assert sorted(reads) == sorted([allgemein, kampagnen])


async def test_a_thread_opened_by_id_is_listed_under_its_channels_known_space(
    served: ServedWorld, context: BrowserContext
) -> None:
    from playwright.async_api import expect

    page = await context.new_page()
    await sign_in(page, served.url, served.token("sam"))
    created = await _new_thread(served, "sam", "kampagnen", "Spring launch")
    await expect(page.locator(f'[data-thread-id="{created}"]')).to_be_visible(timeout=LIVE_MS)
    # Opened by id: a fresh main thread has no events, its channel's space is known.
    main = served.main_thread("kampagnen")
    await open_thread(page, main)
    opened = page.locator(f'[data-thread-id="{main}"]')
    await expect(opened.locator(".thread-name")).to_have_text("Kampagnen")
    space = str(served.world.spaces["marketing"].id)
    channel = str(served.world.channels["kampagnen"].id)
    await expect(page.locator("#thread-tree h4")).to_have_text([f"Channel {channel[-8:]}"])
    await expect(page.locator("#thread-tree h3")).to_have_text([f"Space {space[-8:]}"])
    await expect(page.locator("#thread-tree .thread-list")).to_have_count(1)
    await expect(page.locator("#thread-tree .thread-link")).to_have_count(2)


async def test_a_channel_opened_first_by_id_joins_its_space_once_known(
    served: ServedWorld, context: BrowserContext
) -> None:
    from playwright.async_api import expect

    page = await context.new_page()
    await sign_in(page, served.url, served.token("sam"))
    main = served.main_thread("kampagnen")
    await open_thread(page, main)
    await expect(page.locator("#thread-tree h3")).to_have_text(["Space not yet known"])
    created = await _new_thread(served, "sam", "kampagnen", "Autumn launch")
    await expect(page.locator(f'[data-thread-id="{created}"]')).to_be_visible(timeout=LIVE_MS)
    space = str(served.world.spaces["marketing"].id)
    await expect(page.locator("#thread-tree h3")).to_have_text([f"Space {space[-8:]}"])
    await expect(page.locator("#thread-tree h4")).to_have_count(1)
    await expect(page.locator("#thread-tree .thread-link")).to_have_count(2)


async def test_the_owner_sees_a_held_agent_send_live_and_a_person_never_does(
    served: ServedWorld, context: BrowserContext
) -> None:
    from playwright.async_api import expect

    thread = served.main_thread("eskalation")
    await served.post("alex", thread, "Is the invoice paid?")
    owner = await context.new_page()
    await sign_in(owner, served.url, served.world.owner.token)
    await open_thread(owner, thread)
    alex = await context.new_page()
    await sign_in(alex, served.url, served.token("alex"))
    await open_thread(alex, thread)

    await served.post("alex", thread, "Never mind, it is.")
    await served.stale_send("lotse", thread, 1, "Not yet, Alex.")
    held = owner.locator("#timeline > li.held-entry")
    await expect(held).to_have_count(1, timeout=LIVE_MS)
    await expect(held).to_have_attribute("data-held-seen", "1")
    await expect(held).to_have_attribute("data-held-latest", "2")
    await expect(held.locator(".author")).to_have_text("@lotse")
    await expect(held.locator(".held-badge")).to_have_attribute(
        "title", "Held send by @lotse: it had read through #1, the thread was at #2"
    )
    await expect(owner.locator("#timeline")).not_to_contain_text("Not yet, Alex.")
    # After the newest message it was held for.
    order = await owner.evaluate(
        "Array.from(document.querySelectorAll('#timeline > li'))"
        ".map((li) => li.dataset.seq || 'held')"
    )
    assert order == ["1", "2", "held"]
    await expect(owner.locator("#held summary")).to_have_text("Held agent sends (1 in this thread)")
    await _screenshots(owner, "held")

    # Alex reads the thread, never the held send: the stream is in log order, so a post
    # written after it arrives after it would have.
    await served.post("robin", thread, "Lotse, read the thread first.")
    await expect(message(alex, "Lotse, read the thread first.")).to_be_visible(timeout=LIVE_MS)
    await expect(alex.locator("#timeline > li.held-entry")).to_have_count(0)
    await expect(alex.locator("#held summary")).to_have_text("Held agent sends")


async def test_a_refused_token_is_not_kept_and_a_reload_keeps_the_session(
    served: ServedWorld, context: BrowserContext
) -> None:
    from playwright.async_api import expect

    page = await context.new_page()
    await page.goto(f"{served.url}/console")
    await page.locator("#token-input").fill("not-a-token")
    await page.locator("#token-input").press("Enter")
    await expect(page.locator("#sign-in-error")).to_contain_text("401 unauthenticated")
    assert await page.evaluate("sessionStorage.length") == 0

    await sign_in(page, served.url, served.token("sam"))
    await expect(page.locator("#me")).to_have_text("Signed in as @sam (person)")
    await page.reload()
    await expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
    await expect(page.locator("#me")).to_have_text("Signed in as @sam (person)")
    await page.locator("#sign-out").click()
    await expect(page.locator("#sign-in")).to_be_visible()
    assert await page.evaluate("sessionStorage.length") == 0
