"""/docs works offline: the page names only assets of this server, and they are served."""

from __future__ import annotations

import re

import pytest

from tests.support.http import ContractClient
from turnkeeper.adapters.http.docs_page import ASSET_FILES, ASSETS_PATH, assets_dir

_REFERENCES = re.compile(r"""(?:src|href)\s*=\s*['"]([^'"]+)['"]""")


async def test_the_docs_page_loads_nothing_from_elsewhere(client: ContractClient) -> None:
    page = await client.get("/docs")
    assert page.status_code == 200
    head = page.text.split("<body>", 1)[0]
    references = _REFERENCES.findall(head)
    assert sorted(references) == sorted(f"{ASSETS_PATH}/{name}" for name in ASSET_FILES)
    assert "cdn" not in head.lower()
    assert "http://" not in head
    assert "https://" not in head


async def test_every_asset_of_the_page_is_served_from_the_package(client: ContractClient) -> None:
    types = {".js": "text/javascript", ".css": "text/css", ".png": "image/png"}
    for name in ASSET_FILES:
        answer = await client.get(f"{ASSETS_PATH}/{name}")
        assert answer.status_code == 200, name
        assert answer.headers["content-type"].startswith(types[name[name.rindex(".") :]]), name
        assert answer.content == (assets_dir() / name).read_bytes(), name
        assert "max-age" in answer.headers["cache-control"]


async def test_the_packaged_copy_keeps_its_license(client: ContractClient) -> None:
    license_text = (assets_dir() / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in license_text
    assert (await client.get(f"{ASSETS_PATH}/no-such-file.js")).status_code == 404


@pytest.mark.parametrize("path", ["/docs/redoc", "/docs/zzz", "/docs/index.html"])
async def test_an_unknown_page_under_docs_is_the_not_found_problem(
    client: ContractClient, path: str
) -> None:
    # Litestar's documentation router answered its own HTML page (API.md: problem+json).
    unknown = await client.get("/nowhere")
    answer = await client.get(path)
    assert (answer.status_code, answer.headers["content-type"]) == (
        404,
        unknown.headers["content-type"],
    )
    body = answer.json()
    assert body["correlation_id"] == answer.headers["x-correlation-id"]
    assert {**body, "correlation_id": ""} == {**unknown.json(), "correlation_id": ""}
