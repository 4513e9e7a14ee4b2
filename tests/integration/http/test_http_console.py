"""GET /console: the pinned page and files, their headers, and nothing else (issue 21)."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from tests.support.http import ContractClient
from turnkeeper.adapters.http.console import ASSET_TYPES, CONTENT_SECURITY_POLICY

FILES = ("index.html", *ASSET_TYPES)
#: Every address in the files; only the SVG namespace (a name, never fetched) may be one.
URL = re.compile(r"(?:https?:)?//[A-Za-z0-9.-]+\.[A-Za-z]{2,}[^\s\"')]*")
ALLOWED_URLS = {"http://www.w3.org/2000/svg"}


def _shipped(name: str) -> str:
    folder = resources.files("turnkeeper.adapters.http").joinpath("console")
    return folder.joinpath(name).read_text(encoding="utf-8")


async def test_the_page_is_served_with_a_self_only_policy(client: ContractClient) -> None:
    page = await client.get("/console")
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert page.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    policy = dict(part.strip().split(" ", 1) for part in CONTENT_SECURITY_POLICY.split(";"))
    assert policy["default-src"] == policy["script-src"] == policy["connect-src"] == "'self'"
    assert policy["frame-ancestors"] == policy["object-src"] == "'none'"
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["referrer-policy"] == "no-referrer"
    assert page.headers["cache-control"] == "no-cache"
    assert page.text == _shipped("index.html")
    assert '<script src="/console/console.js" defer></script>' in page.text
    assert '<link rel="stylesheet" href="/console/console.css">' in page.text


@pytest.mark.parametrize("name", list(ASSET_TYPES))
async def test_each_pinned_file_is_served_with_its_type(client: ContractClient, name: str) -> None:
    answer = await client.get(f"/console/{name}")
    assert answer.status_code == 200
    assert answer.headers["content-type"] == f"{ASSET_TYPES[name]}; charset=utf-8"
    assert answer.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert answer.headers["etag"].startswith('"')
    assert answer.text == _shipped(name)


@pytest.mark.parametrize("name", ["secret.txt", "..%2Fconsole.py", "index.htm", "CONSOLE.JS"])
async def test_any_other_name_is_the_404_of_an_unknown_path(
    client: ContractClient, name: str
) -> None:
    answer = await client.get(f"/console/{name}")
    unknown = await client.get("/no-such-path")
    assert answer.status_code == unknown.status_code == 404
    assert answer.headers["content-type"] == unknown.headers["content-type"]
    strip = {"correlation_id"}
    assert {k: v for k, v in answer.json().items() if k not in strip} == {
        k: v for k, v in unknown.json().items() if k not in strip
    }


async def test_the_console_is_not_part_of_the_api_document(client: ContractClient) -> None:
    paths = (await client.get("/openapi.json")).json()["paths"]
    assert not [path for path in paths if path.startswith("/console")]


@pytest.mark.parametrize("name", FILES)
def test_no_file_loads_anything_from_elsewhere(name: str) -> None:
    text = _shipped(name)
    assert set(URL.findall(text)) <= ALLOWED_URLS
    assert "@import" not in text
    assert "@font-face" not in text


def test_the_page_has_no_inline_script_or_style() -> None:
    page = _shipped("index.html")
    assert re.findall(r"<script(?![^>]*\bsrc=)", page) == []
    assert "<style" not in page
    assert " style=" not in page
    assert not re.search(r"\son[a-z]+=", page)


def test_the_script_never_puts_the_token_into_an_address_or_markup() -> None:
    script = _shipped("console.js")
    assert "innerHTML" not in script
    assert "insertAdjacentHTML" not in script
    assert "EventSource" not in script.replace("EventSource cannot", "")
    assert re.findall(r"sessionStorage\.\w+", script) == [
        "sessionStorage.removeItem",
        "sessionStorage.setItem",
        "sessionStorage.removeItem",
        "sessionStorage.getItem",
    ]
