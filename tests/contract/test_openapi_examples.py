"""Every problem example of the OpenAPI document is a real answer of the server."""

from __future__ import annotations

from typing import Any

from tests.support.http import ContractClient
from tests.support.openapi import assert_matches_openapi
from turnkeeper.adapters.http.problems import STATUS_BY_CODE, ProblemAnswer, problem_of

PROBLEM_MEDIA_TYPE = "application/problem+json"


def _problem_examples(spec: dict[str, Any]) -> list[tuple[str, str, int, dict[str, Any]]]:
    found = []
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            for status, response in operation.get("responses", {}).items():
                media = response.get("content", {}).get(PROBLEM_MEDIA_TYPE)
                if media is None:
                    continue
                assert "example" not in media, (method, path, status)
                for example in media.get("examples", {}).values():
                    found.append((method, path, int(status), example))
    return found


def _walk(node: Any) -> list[str]:
    keys = []
    if isinstance(node, dict):
        for key, value in node.items():
            keys.append(key)
            keys.extend(_walk(value))
    elif isinstance(node, list):
        for value in node:
            keys.extend(_walk(value))
    return keys


async def test_every_problem_answer_shows_real_examples(client: ContractClient) -> None:
    examples = _problem_examples(client.spec)
    statuses = {status for _, _, status, _ in examples}
    assert statuses >= {400, 401, 403, 404, 409, 413, 429, 500}
    for method, path, status, example in examples:
        assert set(example) == {"summary", "value"}, (method, path, status)
        value = example["value"]
        code = value["code"]
        # The same document the server renders for that problem, and the status it has.
        assert STATUS_BY_CODE[code] == status == value["status"], (method, path, value)
        rendered = problem_of(
            ProblemAnswer(
                code=code,
                status=status,
                reason=value.get("reason"),
                errors=(),
            ),
            value["correlation_id"],
        )
        assert (value["type"], value["title"]) == (rendered.type, rendered.title)
        assert_matches_openapi(client.spec, method, path, status, value)


async def test_schemas_carry_no_invented_examples(client: ContractClient) -> None:
    schemas = client.spec["components"]["schemas"]
    assert "examples" not in _walk(schemas)
    assert "example" not in _walk(schemas)
