"""``http.parser = httptools`` and ``http.event_loop = uvloop`` need the ``fast`` extra.

Without its module such a choice is invalid configuration, refused when the
configuration is loaded: before, ``turnkeeper serve`` migrated the database and printed
the owner's one-time token, then failed. A module is made missing for a test by putting
None in `sys.modules` (what `importlib.util.find_spec` and ``import`` then report as not
installed), so nothing is uninstalled.
"""

from __future__ import annotations

import importlib.util
import sys

import pytest

from turnkeeper.adapters.config import ConfigError, env_name, load_settings
from turnkeeper.application.settings import SETTING_KEYS

#: Key, the value that needs the module, the module.
NEEDS_THE_FAST_EXTRA = [
    ("http.parser", "httptools", "httptools"),
    ("http.event_loop", "uvloop", "uvloop"),
]


@pytest.mark.parametrize(("key", "value", "module"), NEEDS_THE_FAST_EXTRA)
def test_a_choice_whose_module_is_missing_is_refused_naming_the_key(
    key: str, value: str, module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    attribute = SETTING_KEYS[key]
    with monkeypatch.context() as missing:
        missing.setitem(sys.modules, module, None)
        with pytest.raises(ConfigError) as caught:
            load_settings({env_name(key): value})
        assert str(caught.value) == (
            f"invalid configuration: {key} is {value}, which needs the fast extra "
            f"(pip install 'turnkeeper[fast]'): {module} is not installed"
        )
        # auto falls back to the standard choice, so it stays valid without the module.
        assert getattr(load_settings({env_name(key): "auto"}), attribute) == "auto"
    # The dev environment installs the fast extra: there the choice is taken.
    assert importlib.util.find_spec(module) is not None
    assert getattr(load_settings({env_name(key): value}), attribute) == value
