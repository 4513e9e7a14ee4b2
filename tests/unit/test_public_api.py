"""The public API of the package root: pinned, documented, loaded lazily, and complete."""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

import turnkeeper

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "turnkeeper"
REFERENCE = ROOT / "docs" / "reference"

#: The curated names of ``turnkeeper.__all__``; a change here is a change of the API.
PUBLIC = [
    "AccessDenied",
    "AdminService",
    "AgentEventPage",
    "AgentFeedService",
    "AgentRuntimeClient",
    "AgentSend",
    "AgentSendService",
    "ApiToken",
    "ApplicationError",
    "Backend",
    "BaseVersionConflict",
    "BearerToken",
    "BillingMode",
    "Channel",
    "ChannelType",
    "ClientError",
    "ClientProblem",
    "ClientUnavailable",
    "ConfigError",
    "Conflict",
    "ConversationService",
    "CreatedThread",
    "Delivery",
    "DomainError",
    "DuplicateKey",
    "EmbeddedPostgres",
    "EmbeddedServerMissing",
    "Event",
    "EventBus",
    "EventPage",
    "EventType",
    "FieldError",
    "FollowupMode",
    "FollowupOp",
    "FollowupState",
    "Forbidden",
    "GrantChange",
    "GrantService",
    "IdempotencyConflict",
    "IdentityService",
    "InvalidStateTransition",
    "InvalidToken",
    "IssuedToken",
    "JwtSigner",
    "Level",
    "MemoryUnitOfWorkFactory",
    "Message",
    "MessageDraft",
    "MessagePage",
    "MessagePosted",
    "MigrationError",
    "NewPrincipal",
    "NotFound",
    "OperatorMode",
    "Origin",
    "OwnerTokenRefused",
    "PostedMessage",
    "PostgresUnitOfWorkFactory",
    "Principal",
    "PrincipalKind",
    "RateLimited",
    "ReadDenied",
    "ResourceKind",
    "RetriableConflict",
    "Run",
    "RunJobsService",
    "RunLifecycleService",
    "RunPatchService",
    "RunState",
    "RunView",
    "RunsService",
    "SendFreshness",
    "SendOutcome",
    "Services",
    "Settings",
    "Space",
    "StoreUnavailable",
    "SystemClock",
    "Thread",
    "TokenService",
    "TriggerState",
    "Unauthenticated",
    "UuidV7Generator",
    "ValidationFailed",
    "__version__",
    "build_services",
    "load_settings",
    "memory_backend",
    "migrate",
    "postgres_backend",
]


def _modules() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if not any(part.startswith("_") for part in parts):
            found.append(".".join(parts))
    return found


def _nav_pages() -> set[str]:
    # Nav entries of mkdocs.yml look like "      - title: reference/<module>.md".
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    return set(re.findall(r"^\s+- [^:]+: (reference/\S+\.md)$", text, flags=re.MULTILINE))


def test_all_is_the_pinned_list() -> None:
    assert sorted(turnkeeper.__all__) == sorted(PUBLIC)
    assert len(set(turnkeeper.__all__)) == len(turnkeeper.__all__)


def test_the_version_comes_from_the_package_metadata() -> None:
    from importlib.metadata import version

    assert turnkeeper.__version__ == version("turnkeeper")


@pytest.mark.parametrize("name", [n for n in PUBLIC if n != "__version__"])
def test_every_public_name_resolves_and_has_a_docstring(name: str) -> None:
    value = getattr(turnkeeper, name)
    assert (inspect.getdoc(value) or "").strip(), name
    home = value.__module__
    assert home.startswith("turnkeeper."), (name, home)
    assert (REFERENCE / f"{home}.md").is_file(), f"{name}: no reference page for {home}"


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'memory_store'"):
        _ = turnkeeper.memory_store  # type: ignore[attr-defined]  # mypy flags it, as it must


def test_the_static_imports_match_the_lazy_table() -> None:
    # mypy reads the TYPE_CHECKING imports, the running program the table: they must agree.
    tree = ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    static: dict[str, str] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        module = node.module or ""
        if module.startswith("turnkeeper."):
            for alias in node.names:
                # Re-exported through the literal __all__, which mypy --strict reads.
                assert alias.asname is None, "import the name itself"
                static[alias.name] = module
    assert static == turnkeeper._HOMES


def test_all_is_a_literal_list_of_the_table() -> None:
    # Type checkers read `__all__` only when it is written out (`from turnkeeper import *`).
    tree = ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    assigned = [
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
    ]
    assert len(assigned) == 1
    assert ast.literal_eval(assigned[0]) == sorted([*turnkeeper._HOMES, "__version__"])


#: A program that uses the package root well and badly, for `mypy --strict`.
TYPED_PROGRAM = """
import turnkeeper
from turnkeeper import *

backend = turnkeeper.memory_backnd(turnkeeper.Settings())
services = memory_backend(Settings())
factory = MemoryUnitOfWorkFactory()


async def unit() -> None:
    async with factory() as uow:
        await uow.no_such_repository.get(1)
    async with factory.read_only() as reader:
        await reader.no_such_repository.get(1)
"""


def test_mypy_flags_misspelled_names_and_types_what_it_loads(tmp_path: Path) -> None:
    # A module `__getattr__` that mypy can see makes any name under `turnkeeper.` an Any;
    # a computed `__all__` hides the names from a star import.
    program = tmp_path / "program.py"
    program.write_text(TYPED_PROGRAM, encoding="utf-8")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--cache-dir",
            str(tmp_path / "cache"),
            "program.py",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    errors = [line for line in done.stdout.splitlines() if ": error: " in line]
    assert [line.split(":")[1] for line in errors] == ["5", "12", "14"], done.stdout
    assert 'has no attribute "memory_backnd"' in errors[0]
    assert all('"UnitOfWork" has no attribute "no_such_repository"' in e for e in errors[1:])


def test_every_module_has_a_reference_page_in_the_nav() -> None:
    nav = _nav_pages()
    modules = _modules()
    assert "turnkeeper" in modules
    assert "turnkeeper.adapters.http.app" in modules
    for module in modules:
        page = REFERENCE / f"{module}.md"
        assert page.is_file(), f"no page for {module}"
        assert page.read_text(encoding="utf-8").startswith(f"::: {module}\n")
        assert f"reference/{module}.md" in nav, f"{module} is not in the mkdocs nav"
    pages = {p.stem for p in REFERENCE.glob("*.md")}
    assert pages == set(modules), "a reference page names no module"
    # A nav entry of a removed module fails only a strict build without --quiet.
    assert nav == {f"reference/{m}.md" for m in modules}, "a nav entry names no page"


def test_importing_the_domain_loads_no_driver_or_framework() -> None:
    code = (
        "import sys, turnkeeper.domain.runs, turnkeeper.domain.freshness; "
        "print(sorted(m for m in ('psycopg', 'litestar', 'httpx', 'pgserver') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert done.stdout.strip() == "[]"
