"""`members_by_value` answers what calling the enum answers, for every stored enum."""

from __future__ import annotations

import enum
import inspect

import pytest

from turnkeeper.adapters.postgres.base import members_by_value
from turnkeeper.domain import credentials, events, followups, messaging, runs, world

#: Every enum of the domain modules whose values the tables store.
ENUMS = sorted(
    {
        value
        for module in (credentials, events, followups, messaging, runs, world)
        for value in vars(module).values()
        if inspect.isclass(value) and issubclass(value, enum.Enum) and value is not enum.Enum
    },
    key=lambda kind: kind.__name__,
)


def test_the_domain_has_enums_to_check() -> None:
    assert len(ENUMS) >= 5


@pytest.mark.parametrize("kind", ENUMS, ids=lambda kind: kind.__name__)
def test_each_value_maps_to_the_member_the_enum_call_gives(kind: type[enum.Enum]) -> None:
    table = members_by_value(kind)
    assert len(table) == len(kind)
    for member in kind:
        assert table[member.value] is kind(member.value)


@pytest.mark.parametrize("kind", ENUMS, ids=lambda kind: kind.__name__)
def test_an_unknown_value_is_refused(kind: type[enum.Enum]) -> None:
    with pytest.raises(KeyError):
        members_by_value(kind)["no such value"]
