"""``TURNKEEPER_SIGNING_KEY`` is documented and refused below 32 bytes.

HS256 wants a key at least as long as its hash, 32 bytes (RFC 7518, section 3.2);
PyJWT only warns about a shorter one, so ``abc`` signed every invocation token of a
deployment. The key is counted in UTF-8 bytes, as it is used, and is never printed.
"""

from __future__ import annotations

import pytest

from tests.support.config_doc import outside_variables
from turnkeeper.adapters import config
from turnkeeper.adapters.config import ConfigError, load_config

#: The shortest key, in bytes (RFC 7518, section 3.2).
MIN_KEY_BYTES = 32


@pytest.mark.parametrize(
    ("key", "size"),
    [
        ("abc", 3),
        ("k" * (MIN_KEY_BYTES - 1), MIN_KEY_BYTES - 1),
        # 31 characters of padding around one key character: the padding is not key.
        ("  " + "k" * (MIN_KEY_BYTES - 1) + "\n", MIN_KEY_BYTES - 1),
        # Characters are not bytes: 15 two-byte characters are 30 bytes.
        ("\u00e9" * 15, 30),
    ],
)
def test_a_short_signing_key_is_refused_without_printing_it(key: str, size: int) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config({"TURNKEEPER_SIGNING_KEY": key})
    line = str(caught.value)
    assert line == (
        f"invalid configuration: TURNKEEPER_SIGNING_KEY must be at least {MIN_KEY_BYTES} "
        f"bytes, got {size}"
    )
    assert key.strip() not in line


@pytest.mark.parametrize(
    "key", ["k" * MIN_KEY_BYTES, "\u00e9" * (MIN_KEY_BYTES // 2), "0123456789abcdef" * 4]
)
def test_a_signing_key_of_32_bytes_or_more_is_taken(key: str) -> None:
    assert load_config({"TURNKEEPER_SIGNING_KEY": key}).signing_key == key
    assert config.MIN_SIGNING_KEY_BYTES == MIN_KEY_BYTES


def test_every_variable_outside_the_keys_is_documented() -> None:
    read = {
        value
        for name, value in vars(config).items()
        if name.startswith("ENV_") and name != "ENV_PREFIX"
    }
    assert read <= outside_variables(), read - outside_variables()
