"""What the console must never leave behind: a token in an address, a signed-out
person's thread in the page, an unreadable thread in the list, a lost thread address.

Each case was reproduced against the served console before its fix (docs/console.md:
the token "never appears in an address"; Sign out "forgets it"; "The list holds the
threads that have events this token may read"; the address "ends in #thread=<id>, a link
you can keep"; "no horizontal scroll at 375 px").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.browser.support import (
    LIVE_MS,
    PHONE,
    ServedWorld,
    message,
    open_thread,
    sign_in,
)

if TYPE_CHECKING:
    from playwright.async_api import Browser, BrowserContext, Route

#: A client id without a place to break a line, as a runtime may make one.
LONG_CLIENT_ID = "held-" + "x" * 150


async def test_a_token_entered_before_the_script_runs_never_reaches_the_address(
    served: ServedWorld, context: BrowserContext
) -> None:
    async def no_script(route: Route) -> None:
        await route.abort()

    page = await context.new_page()
    # The script that takes the form over never arrives (a slow or blocked network).
    await page.route("**/console/console.js", no_script)
    await page.goto(f"{served.url}/console")
    token = served.token("alex")
    await page.locator("#token-input").fill(token)
    async with page.expect_navigation():
        await page.locator("#token-input").press("Enter")
    assert token not in page.url
    assert "token" not in page.url


async def test_sign_out_leaves_nothing_of_the_token_in_the_page(
    served: ServedWorld, context: BrowserContext
) -> None:
    from playwright.async_api import expect

    thread = served.main_thread("eskalation")
    await served.post("alex", thread, "Only Alex reads this.", restricted_to=[served.id_of("alex")])
    page = await context.new_page()
    await sign_in(page, served.url, served.token("alex"))
    await open_thread(page, thread)
    await expect(message(page, "Only Alex reads this.")).to_be_visible(timeout=LIVE_MS)
    await page.locator("#message-input").fill("a draft of Alex")

    await page.locator("#sign-out").click()

    await expect(page.locator("#sign-in")).to_be_visible()
    await expect(page.locator("#timeline > li")).to_have_count(0)
    await expect(page.locator("#thread-tree > *")).to_have_count(0)
    await expect(page.locator("#message-input")).to_have_value("")
    assert "Only Alex" not in await page.content()
    assert "thread=" not in page.url


async def test_a_thread_the_token_cannot_read_is_not_listed(
    served: ServedWorld, context: BrowserContext
) -> None:
    from playwright.async_api import expect

    hidden = served.main_thread("eskalation")  # Sam holds no read there
    page = await context.new_page()
    await sign_in(page, served.url, served.token("sam"))
    await page.locator("#open-thread-input").fill(hidden)
    await page.locator("#open-thread-input").press("Enter")
    await expect(page.locator("#thread-status")).to_contain_text("404 not_found")
    await expect(page.locator(f'[data-thread-id="{hidden}"]')).to_have_count(0)


async def test_the_skip_link_and_a_run_boxs_message_link_keep_the_thread_address(
    served: ServedWorld, context: BrowserContext
) -> None:
    from playwright.async_api import expect

    thread = served.main_thread("allgemein")
    page = await context.new_page()
    await sign_in(page, served.url, served.token("alex"))
    await open_thread(page, thread)
    await served.post("alex", thread, "Lotse, is the printer fixed?")
    link = page.locator("section.run .ref").first
    await expect(link).to_contain_text("printer", timeout=LIVE_MS)
    kept = f"#thread={thread}"
    assert page.url.endswith(kept)

    await page.locator("a.skip").focus()
    await page.keyboard.press("Enter")
    await expect(page.locator("#thread")).to_be_focused()
    assert page.url.endswith(kept)

    await link.click()
    await expect(message(page, "printer")).to_be_focused()
    assert page.url.endswith(kept)


async def test_a_held_send_with_a_long_client_id_does_not_scroll_sideways(
    served: ServedWorld, browser: Browser
) -> None:
    from playwright.async_api import expect

    thread = served.main_thread("allgemein")
    await served.post("alex", thread, "Anyone there?")
    phone = await browser.new_context(viewport=PHONE)  # type: ignore[arg-type]
    try:
        page = await phone.new_page()
        await sign_in(page, served.url, served.world.owner.token)
        await open_thread(page, thread)
        body = {
            "target": thread,
            "content": "An old answer.",
            "client_message_id": LONG_CLIENT_ID,
            "freshness": {"target_key": f"thread:{thread}", "seen_up_to_seq": 0},
        }
        answer = await served.call("texter", "POST", "/v1/agent/send", body)
        assert answer["state"] == "held", answer
        await expect(page.locator("#timeline > li.held-entry")).to_have_count(1, timeout=LIVE_MS)
        overflow = await page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 0
    finally:
        await phone.close()
