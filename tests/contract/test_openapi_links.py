"""The links of the published document are valid OpenAPI 3.1 and lead where they say.

Every link names an existing operation, fills only parameters and body members that
operation has, and reads only members its answer declares; every operation that takes an
id is the target of a link; schemathesis builds its state machine from them; the page
under /docs serves the same document.
"""

from __future__ import annotations

from typing import Any

import schemathesis

from tests.support.http import ContractClient
from tests.support.openapi import Spec
from turnkeeper.adapters.http.openapi_links import CARRIERS, CONSUMERS

EXPRESSION_PREFIX = "$response.body#"
METHODS = ("get", "put", "post", "delete", "patch")


def _resolve(spec: Spec, schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def _declares(spec: Spec, schema: dict[str, Any], pointer: str) -> bool:
    """Whether a schema declares the member a JSON pointer names."""
    if not pointer:
        return True
    token, _, rest = pointer[1:].partition("/")
    rest = f"/{rest}" if rest else ""
    schema = _resolve(spec, schema)
    for option in schema.get("oneOf", []) + schema.get("anyOf", []):
        if _declares(spec, option, pointer):
            return True
    if token in schema.get("properties", {}):
        return _declares(spec, schema["properties"][token], rest)
    if token.isdigit() and "items" in schema:
        return _declares(spec, schema["items"], rest)
    # A free-form object (an event's payload) holds any member.
    return schema.get("type") == "object" and schema.get("additionalProperties") not in (
        None,
        False,
    )


def _operations(spec: Spec) -> dict[str, tuple[str, str, dict[str, Any]]]:
    return {
        operation["operationId"]: (method, path, operation)
        for path, item in spec["paths"].items()
        for method, operation in item.items()
        if method in METHODS
    }


def _links(spec: Spec) -> list[tuple[str, str, str, str, dict[str, Any]]]:
    return [
        (method, path, status, name, link)
        for path, item in spec["paths"].items()
        for method, operation in item.items()
        if method in METHODS
        for status, answer in operation["responses"].items()
        for name, link in answer.get("links", {}).items()
    ]


def _answer_schema(operation: dict[str, Any], status: str) -> dict[str, Any]:
    schema: dict[str, Any] = operation["responses"][status]["content"]["application/json"]["schema"]
    return schema


def _expressions(value: Any, at: str = "") -> list[tuple[str, str]]:
    """(member of the request body, runtime expression) of every expression in a template."""
    if isinstance(value, dict):
        return [
            pair for key, member in value.items() for pair in _expressions(member, f"{at}/{key}")
        ]
    return [(at, value)] if isinstance(value, str) and value.startswith("$") else []


async def test_the_document_is_valid_openapi_3_1(client: ContractClient) -> None:
    schemathesis.openapi.from_dict(client.spec).validate()


async def test_every_link_fills_what_its_operation_takes_from_what_its_answer_declares(
    client: ContractClient,
) -> None:
    spec = client.spec
    operations = _operations(spec)
    links = _links(spec)
    assert links
    for method, path, status, name, link in links:
        where = f"{method.upper()} {path} {status} {name}"
        assert link["operationId"] in operations, where
        _, _, target = operations[link["operationId"]]
        taken = {p["name"] for p in target.get("parameters", []) if p["in"] == "path"}
        assert set(link.get("parameters", {})) <= taken, where
        source = _answer_schema(spec["paths"][path][method], status)
        pairs = [("", e) for e in link.get("parameters", {}).values()]
        pairs += _expressions(link.get("requestBody"))
        for member, expression in pairs:
            assert expression.startswith(EXPRESSION_PREFIX), where
            assert _declares(spec, source, expression.removeprefix(EXPRESSION_PREFIX)), where
            if member:
                body = target["requestBody"]["content"]["application/json"]["schema"]
                assert _declares(spec, body, member), where


async def test_every_operation_that_takes_an_id_is_the_target_of_a_link(
    client: ContractClient,
) -> None:
    spec = client.spec
    targets = {link["operationId"] for *_, link in _links(spec)}
    for operation_id, (method, path, _) in _operations(spec).items():
        if "{" in path:
            assert operation_id in targets, f"{method.upper()} {path}"


async def test_every_id_kind_carried_has_consumers(client: ContractClient) -> None:
    carried = {kind for kinds in CARRIERS.values() for kind in kinds}
    assert carried == set(CONSUMERS)


async def test_schemathesis_builds_its_state_machine_from_the_links(
    client: ContractClient,
) -> None:
    # Without inference, every transition of the machine is a link of the document.
    config = schemathesis.Config.from_dict(
        {"phases": {"stateful": {"inference": {"algorithms": []}}}}
    )
    schema = schemathesis.openapi.from_dict(client.spec, config=config)
    machine = schema.as_state_machine()
    assert schema.statistic.transitions.total == len(_links(client.spec))
    assert machine.bundles


async def test_the_docs_page_serves_the_same_document(client: ContractClient) -> None:
    served = await client.http.get("/docs/openapi.json")
    assert served.json() == client.spec
