"""GET /console: the pinned page and files, their headers, and nothing else (issue 21)."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from importlib import resources

import pytest

from tests.support.http import ContractClient
from tests.support.json_log import captured_json_log, json_records
from turnkeeper.adapters.http.console import ASSET_TYPES, CONTENT_SECURITY_POLICY

FILES = ("index.html", *ASSET_TYPES)
#: Every address in the files; only the SVG namespace (a name, never fetched) may be one.
URL = re.compile(r"(?:https?:)?//[A-Za-z0-9.-]+\.[A-Za-z]{2,}[^\s\"')]*")
ALLOWED_URLS = {"http://www.w3.org/2000/svg"}
#: The headers that every answer under /console carries (ADR 0019, Decision 1).
SECURITY_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}


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


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/console", 200),
        ("HEAD", "/console", 200),
        ("HEAD", "/console/console.js", 200),
        ("GET", "/console/nosuch.js", 404),
        ("HEAD", "/console/nosuch.js", 404),
        ("GET", "/console/a/b", 404),
        ("POST", "/console/nosuch.js", 405),
        ("OPTIONS", "/console", 204),
        ("OPTIONS", "/console/console.js", 204),
        ("POST", "/console/console.js", 405),
        ("DELETE", "/console", 405),
        ("PROPFIND", "/console/console.css", 405),
    ],
)
async def test_every_answer_under_the_console_carries_the_security_headers(
    client: ContractClient, method: str, path: str, status: int
) -> None:
    answer = await client.request(method, path)
    assert answer.status_code == status
    assert {name: answer.headers.get(name) for name in SECURITY_HEADERS} == SECURITY_HEADERS


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/consolex"),
        ("POST", "/console-old/console.js"),
        ("GET", "/no-such-path"),
        ("GET", "/healthz"),
        ("POST", "/healthz"),
        ("OPTIONS", "/healthz"),
        ("GET", "/openapi.json"),
    ],
)
async def test_answers_outside_the_console_carry_none_of_its_headers(
    client: ContractClient, method: str, path: str
) -> None:
    answer = await client.request(method, path)
    assert not set(SECURITY_HEADERS) & set(answer.headers)


async def test_a_path_that_only_begins_like_the_console_is_an_unknown_path(
    client: ContractClient,
) -> None:
    answer = await client.post("/consolex/console.js")
    unknown = await client.post("/no-such-path")
    assert answer.status_code == unknown.status_code == 404
    assert answer.headers["content-type"] == unknown.headers["content-type"]
    strip = {"correlation_id"}
    assert {k: v for k, v in answer.json().items() if k not in strip} == {
        k: v for k, v in unknown.json().items() if k not in strip
    }


async def test_other_methods_are_refused_and_offered_as_on_any_route(
    client: ContractClient,
) -> None:
    refused = await client.post("/console/console.js")
    elsewhere = await client.post("/healthz")
    assert refused.status_code == elsewhere.status_code == 405
    assert refused.headers["allow"] == elsewhere.headers["allow"] == "GET, HEAD, OPTIONS"
    assert refused.headers["content-type"] == elsewhere.headers["content-type"]
    strip = {"correlation_id"}
    assert {k: v for k, v in refused.json().items() if k not in strip} == {
        k: v for k, v in elsewhere.json().items() if k not in strip
    }
    for path in ("/console", "/console/console.css"):
        offered = await client.request("OPTIONS", path)
        assert offered.status_code == 204
        assert offered.headers["allow"] == "GET, HEAD, OPTIONS"
        assert offered.content == b""
    head = await client.request("HEAD", "/console/console.css")
    got = await client.get("/console/console.css")
    assert head.content == b""
    assert head.headers["content-length"] == got.headers["content-length"]
    assert head.headers["etag"] == got.headers["etag"]


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    """The JSON log lines of the test."""
    with captured_json_log() as stream:
        yield stream


async def test_the_request_log_names_the_console_routes(
    client: ContractClient, log_lines: io.StringIO
) -> None:
    for method, path in [
        ("GET", "/console"),
        ("GET", "/console/console.js"),
        ("GET", "/console/nosuch.js"),
        ("HEAD", "/console/console.css"),
        ("OPTIONS", "/console/console.css"),
        ("GET", "/console/a/b"),
        ("GET", "/consolex"),
    ]:
        await client.request(method, path)
    routes = [
        (r["method"], r["status"], r["route"])
        for r in json_records(log_lines)
        if r.get("event") == "http_request"
    ]
    assert routes == [
        ("GET", 200, "/console"),
        ("GET", 200, "/console/{name}"),
        ("GET", 404, "/console/{name}"),
        ("HEAD", 200, "/console/{name}"),
        ("OPTIONS", 204, "/console/{name}"),
        ("GET", 404, "(unmatched)"),
        ("GET", 404, "(unmatched)"),
    ]


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
