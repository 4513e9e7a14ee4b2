"""`package_version`: the one place the server, the MCP server and the package read it."""

from __future__ import annotations

from importlib import metadata

import pytest

import turnkeeper
from turnkeeper.adapters.system import UNKNOWN_VERSION, package_version


def test_the_version_is_the_installed_packages() -> None:
    assert package_version() == metadata.version("turnkeeper")
    assert turnkeeper.__version__ == package_version()


def test_a_tree_never_installed_has_the_unknown_version(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    assert package_version() == UNKNOWN_VERSION
