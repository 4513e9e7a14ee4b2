"""The program of docs/embedding.md runs as printed, on memory and on PostgreSQL."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "embedding.py"


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("embedding_example", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_page_includes_the_file() -> None:
    page = (EXAMPLE.parents[1] / "embedding.md").read_text(encoding="utf-8")
    assert '--8<-- "docs/examples/embedding.py"' in page


async def test_the_example_runs_on_memory(capsys: pytest.CaptureFixture[str]) -> None:
    types = await _example().on_memory()

    assert types == ["message.created", "message.created", "message.updated"]
    assert "message 1 stored, replayed=False" in capsys.readouterr().out


async def test_the_example_runs_on_postgres_with_migrations(pg_empty_conninfo: str) -> None:
    types = await _example().on_postgres(pg_empty_conninfo)

    assert types == ["message.created", "message.created", "message.updated"]
