"""The tables of docs/configuration.md, read for the tests of the configuration.

The document is the contract of `turnkeeper.adapters.config`: the tests take each key's
type, range and variable from its table, not from the code they test, so that a key
whose documented range and enforced range differ fails a test.
"""

from __future__ import annotations

import re
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parents[2]
CONFIGURATION_DOC = ROOT / "docs" / "configuration.md"

#: The largest count and the longest duration (in seconds) of a key whose row names no
#: upper bound ("N or more"): docs/configuration.md, "Types".
DOCUMENTED_MAXIMUM = 2**31 - 1
#: The heading of the table of variables that are not keys.
OUTSIDE_HEADING = "## Environment variables outside the keys"

#: Variables that let a key take any value of its own range: a pool's minimum must not
#: exceed its maximum, so the maximum is set as large as it goes.
_ROOM = {"database.pool_min_size": {"TURNKEEPER_DATABASE__POOL_MAX_SIZE": str(DOCUMENTED_MAXIMUM)}}
#: A row of the key table: key, type, default, variable, meaning.
_KEY_ROW = re.compile(
    r"^\| `(?P<key>[a-z_.]+)` \| (?P<type>[^|]+) \| [^|]+ \| `(?P<variable>TURNKEEPER_[A-Z_]+)` \|"
)
#: The type of a count or duration key: "integer, 4 or more", "seconds, 1 to 2147483".
_RANGE = re.compile(r"^(?P<unit>\w+), (?P<minimum>\d+) (?:or more|to (?P<maximum>\d+))$")
#: A row of the table of variables outside the keys: its first cell names the variable.
_OUTSIDE_ROW = re.compile(r"^\| `(?P<variable>[A-Z_]+)`")


@attrs.frozen(kw_only=True)
class DocumentedKey:
    """One row of the key table.

    Attributes:
        key: the dotted key.
        type: the type cell as written (``integer, 1 or more``, ``boolean`` ...).
        variable: the environment variable of the key.
        unit: ``integer``, ``seconds``, ``bytes`` or ``characters`` for a number, else None.
        minimum: the smallest number, for a number.
        maximum: the largest number, for a number.
    """

    key: str
    type: str
    variable: str
    unit: str | None = None
    minimum: int | None = None
    maximum: int | None = None

    @property
    def is_duration(self) -> bool:
        """Whether the key is a duration, configured in whole seconds."""
        return self.unit == "seconds"


def environment(row: DocumentedKey, raw: str) -> dict[str, str]:
    """An environment that gives `raw` to the key of `row`, with room for any of its values.

    Args:
        row: the key.
        raw: its value.

    Returns:
        The variables.
    """
    return {**_ROOM.get(row.key, {}), row.variable: raw}


def documented_keys() -> list[DocumentedKey]:
    """Every row of the key table, in the document's order.

    Returns:
        The rows.
    """
    rows = []
    for line in CONFIGURATION_DOC.read_text(encoding="utf-8").splitlines():
        row = _KEY_ROW.match(line)
        if row is None:
            continue
        kind = row["type"].strip()
        numeric = _RANGE.match(kind)
        if numeric is None:
            rows.append(DocumentedKey(key=row["key"], type=kind, variable=row["variable"]))
            continue
        rows.append(
            DocumentedKey(
                key=row["key"],
                type=kind,
                variable=row["variable"],
                unit=numeric["unit"],
                minimum=int(numeric["minimum"]),
                maximum=int(numeric["maximum"] or DOCUMENTED_MAXIMUM),
            )
        )
    return rows


def numeric_keys() -> list[DocumentedKey]:
    """The rows of counts, sizes and durations (those with a range)."""
    return [row for row in documented_keys() if row.unit is not None]


def outside_variables() -> set[str]:
    """The variables of the table "Environment variables outside the keys".

    Returns:
        The variable names.
    """
    text = CONFIGURATION_DOC.read_text(encoding="utf-8")
    section = text.split(OUTSIDE_HEADING, 1)[1].split("\n## ", 1)[0]
    return {
        row["variable"]
        for line in section.splitlines()
        if (row := _OUTSIDE_ROW.match(line)) is not None
    }
