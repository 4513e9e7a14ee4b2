"""Checking answers against the OpenAPI document the application publishes.

`assert_matches_openapi` validates one answer body against the schema of its route,
method, status and media type (JSON Schema 2020-12, as OpenAPI 3.1 uses), with the
document's components for ``$ref``; `assert_no_null` enforces the contract's "no JSON
null anywhere". `template_for` finds the path template of a concrete path, so a test
client can check every answer it sees.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# No stubs ship with jsonschema; types-jsonschema is not a dev dependency (yet).
from jsonschema import Draft202012Validator, FormatChecker  # type: ignore[import-untyped]

Spec = dict[str, Any]

_PARAM = re.compile(r"\{[^/}]+\}")


def assert_no_null(body: Any, where: str = "") -> None:
    """Fail when a JSON document contains null anywhere.

    Args:
        body: the decoded JSON, or a document before encoding (mappings and tuples).
        where: the JSON pointer of `body` (for the message).
    """
    assert body is not None, f"JSON null at {where or '/'}"
    if isinstance(body, Mapping):
        for key, value in body.items():
            assert_no_null(value, f"{where}/{key}")
    elif isinstance(body, list | tuple):
        for index, value in enumerate(body):
            assert_no_null(value, f"{where}/{index}")


def template_for(spec: Spec, path: str) -> str | None:
    """The path template of the document that a concrete path matches.

    Args:
        spec: the OpenAPI document.
        path: a request path without query, for example ``/v1/threads/0190...``.

    Returns:
        The template (``/v1/threads/{thread_id}``), or None when no route matches.
    """
    # Literal segments first: /v1/me must not be taken for a parameter.
    for template in sorted(spec["paths"], key=lambda t: (t.count("{"), t)):
        pattern = "/".join(
            "[^/]+" if _PARAM.fullmatch(part) else re.escape(part) for part in template.split("/")
        )
        if re.fullmatch(pattern, path):
            return str(template)
    return None


def response_schema(spec: Spec, method: str, path_template: str, status: int) -> dict[str, Any]:
    """The schema of an answer as the document declares it.

    Args:
        spec: the OpenAPI document.
        method: the HTTP method.
        path_template: the route's template.
        status: the answer's status.

    Returns:
        The JSON schema of the body (problem+json for errors, JSON otherwise).
    """
    operation = spec["paths"][path_template][method.lower()]
    responses = operation["responses"]
    declared = responses.get(str(status)) or responses.get("default")
    assert declared is not None, (
        f"{method} {path_template} answered {status}, which the document does not declare "
        f"(declared: {sorted(responses)})"
    )
    content = declared.get("content", {})
    assert content, f"{method} {path_template} {status} declares no body"
    media = "application/problem+json" if status >= 400 else "application/json"
    chosen = content.get(media) or next(iter(content.values()))
    return dict(chosen["schema"])


def assert_matches_openapi(
    spec: Spec, method: str, path_template: str, status: int, body: Any
) -> None:
    """Validate an answer body against the published document.

    Args:
        spec: the OpenAPI document (``GET /openapi.json``).
        method: the HTTP method of the request.
        path_template: the route's template, for example ``/v1/threads/{thread_id}``.
        status: the answer's status.
        body: the decoded JSON body.
    """
    assert_no_null(body)
    schema = {
        **response_schema(spec, method, path_template, status),
        "components": spec.get("components", {}),
    }
    validator = Draft202012Validator(schema, format_checker=FormatChecker())
    errors = sorted(validator.iter_errors(body), key=lambda e: list(e.absolute_path))
    assert not errors, f"{method} {path_template} {status}: " + "; ".join(
        f"/{'/'.join(str(p) for p in e.absolute_path)}: {e.message}" for e in errors
    )
