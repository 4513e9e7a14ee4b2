"""The domain imports only the standard library, attrs and itself (DESIGN section 1)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

DOMAIN = Path(__file__).resolve().parents[2] / "turnkeeper" / "domain"
STRATEGIES = "strategies.py"


def imported_roots(source: str) -> list[str]:
    """The root of every absolute import in a module's source.

    The root is the top-level package, except inside turnkeeper, where it is the layer
    (``turnkeeper.domain``, ``turnkeeper.application``, ...).
    """
    modules: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.append(node.module)
    roots = []
    for module in modules:
        parts = module.split(".")
        roots.append(".".join(parts[:2]) if parts[0] == "turnkeeper" else parts[0])
    return roots


def forbidden_imports(source: str, *, file_name: str) -> list[str]:
    """The imports a domain module may not have."""
    allowed = set(sys.stdlib_module_names) | {"attrs", "turnkeeper.domain"}
    if file_name == STRATEGIES:
        allowed.add("hypothesis")
    return [name for name in imported_roots(source) if name not in allowed]


DOMAIN_FILES = sorted(DOMAIN.rglob("*.py"))


def test_the_domain_package_is_found() -> None:
    names = {p.name for p in DOMAIN_FILES}
    assert {"world.py", "authorization.py", "messaging.py", "events.py"} <= names


@pytest.mark.parametrize(
    "path", DOMAIN_FILES, ids=[str(p.relative_to(DOMAIN)) for p in DOMAIN_FILES]
)
def test_domain_module_imports_only_stdlib_attrs_and_domain(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    assert forbidden_imports(source, file_name=path.name) == []


CHECKER_CASES = [
    ("stdlib", "import json\nfrom datetime import datetime\n", "world.py", []),
    ("future", "from __future__ import annotations\n", "world.py", []),
    ("attrs", "import attrs\nfrom attrs import frozen\n", "world.py", []),
    (
        "domain",
        "from turnkeeper.domain.world import Level\nimport turnkeeper.domain.errors\n",
        "x.py",
        [],
    ),
    ("relative", "from .world import Level\nfrom . import errors\n", "x.py", []),
    ("psycopg", "import psycopg\n", "x.py", ["psycopg"]),
    (
        "application",
        "from turnkeeper.application.ports import Clock\n",
        "x.py",
        ["turnkeeper.application"],
    ),
    (
        "adapters-in-function",
        "def f():\n    import turnkeeper.adapters.http\n",
        "x.py",
        ["turnkeeper.adapters"],
    ),
    ("the-package-root", "import turnkeeper\n", "x.py", ["turnkeeper"]),
    ("a-foreign-domain", "from domain.world import Level\n", "x.py", ["domain"]),
    ("attr-is-not-attrs", "import attr\n", "x.py", ["attr"]),
    ("hypothesis-elsewhere", "from hypothesis import strategies\n", "world.py", ["hypothesis"]),
    ("hypothesis-in-strategies", "from hypothesis import strategies\n", STRATEGIES, []),
    ("msgspec-in-strategies", "import msgspec\n", STRATEGIES, ["msgspec"]),
]


@pytest.mark.parametrize(
    ("source", "file_name", "expected"),
    [c[1:] for c in CHECKER_CASES],
    ids=[c[0] for c in CHECKER_CASES],
)
def test_the_import_checker_itself(source: str, file_name: str, expected: list[str]) -> None:
    assert forbidden_imports(source, file_name=file_name) == expected
