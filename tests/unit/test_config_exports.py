"""`ConfigError`, what `turnkeeper.load_settings` raises, is public at the package root."""

from __future__ import annotations

import turnkeeper
from tests.support.config_doc import ROOT
from turnkeeper.adapters import config

EMBEDDING_DOC = ROOT / "docs" / "embedding.md"


def test_the_error_of_load_settings_is_exported_from_the_root() -> None:
    assert turnkeeper.ConfigError is config.ConfigError
    assert "ConfigError" in turnkeeper.__all__
    assert turnkeeper.__all__ == sorted(turnkeeper.__all__)


def test_the_embedding_guide_names_it_where_load_settings_is() -> None:
    rows = [
        line
        for line in EMBEDDING_DOC.read_text(encoding="utf-8").splitlines()
        if line.startswith("| `load_settings()`")
    ]
    assert len(rows) == 1
    assert "`ConfigError`" in rows[0]
