"""Properties of the environment's values: only the documented forms, only in range.

docs/configuration.md: counts, sizes and durations are decimal digits in the
environment, the boolean is ``true``, ``false``, ``1`` or ``0``. Whatever the string,
loading either takes it as exactly that number or boolean, or raises `ConfigError` with
one line naming the key; never another exception (a long duration raised OverflowError).
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tests.support.config_doc import DocumentedKey, documented_keys, environment, numeric_keys
from turnkeeper.adapters.config import ConfigError, load_config, load_settings
from turnkeeper.application.settings import SETTING_KEYS

#: The documented form of a number in the environment: ASCII decimal digits.
DECIMAL = re.compile(r"[0-9]+")
#: The documented spellings of the boolean in the environment.
BOOLEANS = {"true": True, "false": False, "1": True, "0": False}
#: The shortest signing key, in UTF-8 bytes.
MIN_SIGNING_KEY_BYTES = 32

NUMERIC = numeric_keys()
BOOLEAN_KEYS = [row for row in documented_keys() if row.type == "boolean"]

#: Near-misses of the documented forms beside arbitrary text: digits with a sign, spaces,
#: an underscore, a decimal point or a line end around or among them, other scripts'
#: digits, other cases of the boolean's words.
decorated_digits = st.builds(
    lambda before, digits, after: before + digits + after,
    st.sampled_from(["", " ", "+", "-", "\t", "0x", "\n"]),
    st.from_regex(DECIMAL, fullmatch=True),
    st.sampled_from(["", " ", "\n", "_000", ".0", "e3", "\r"]),
)
other_digits = st.text(st.characters(categories=["Nd"]), min_size=1)
words = st.sampled_from(list(BOOLEANS)).map(str.upper) | st.sampled_from(
    ["True", "False", "yes", "no", "on", "off", " true", "false\n", "00", "01"]
)
texts = st.text() | decorated_digits | other_digits | words


def _expected(row: DocumentedKey, number: int) -> object:
    return timedelta(seconds=number) if row.is_duration else number


def _refused(environ: dict[str, str], key: str) -> None:
    """Assert that loading `environ` is refused in one line naming `key`."""
    with pytest.raises(ConfigError) as caught:
        load_settings(environ)
    line = str(caught.value)
    assert line.startswith(f"invalid configuration: {key} ")
    assert "\n" not in line


@given(st.sampled_from(NUMERIC), texts)
def test_a_number_not_in_decimal_digits_is_refused(row: DocumentedKey, raw: str) -> None:
    assume(DECIMAL.fullmatch(raw) is None)
    _refused(environment(row, raw), row.key)


@given(
    st.sampled_from(NUMERIC),
    st.integers(min_value=0, max_value=2**80) | st.integers(min_value=0, max_value=2**33),
)
def test_decimal_digits_are_taken_exactly_when_in_range(row: DocumentedKey, number: int) -> None:
    assert row.minimum is not None
    assert row.maximum is not None
    if row.minimum <= number <= row.maximum:
        settings = load_settings(environment(row, str(number)))
        assert getattr(settings, SETTING_KEYS[row.key]) == _expected(row, number)
    else:
        _refused(environment(row, str(number)), row.key)


@given(st.sampled_from(BOOLEAN_KEYS), texts)
def test_a_boolean_is_one_of_four_spellings(row: DocumentedKey, raw: str) -> None:
    if raw in BOOLEANS:
        settings = load_settings({row.variable: raw})
        assert getattr(settings, SETTING_KEYS[row.key]) is BOOLEANS[raw]
    else:
        _refused({row.variable: raw}, row.key)


@given(st.text(min_size=1))
def test_a_signing_key_is_taken_when_it_has_32_bytes(key: str) -> None:
    # Surrounding whitespace is not part of the key; a blank one is no key.
    used = key.strip()
    if not used or len(used.encode("utf-8")) >= MIN_SIGNING_KEY_BYTES:
        assert load_config({"TURNKEEPER_SIGNING_KEY": key}).signing_key == (used or None)
    else:
        with pytest.raises(ConfigError, match=r"^invalid configuration: TURNKEEPER_SIGNING_KEY "):
            load_config({"TURNKEEPER_SIGNING_KEY": key})
