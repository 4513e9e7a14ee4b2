"""The event value refuses JSON null and keeps audiences for personal events only."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.domain_world import T0, fixed_id
from turnkeeper.domain.events import PERSONAL_TYPES, Event, EventType, NewEvent

AUDIENCE = fixed_id(1, 4)


def new_event(
    payload: Mapping[str, Any],
    *,
    event_type: EventType = EventType.MESSAGE_CREATED,
    audience: uuid.UUID | None = None,
) -> NewEvent:
    return NewEvent(
        type=event_type,
        actor_id=fixed_id(1, 2),
        actor_kind="person",
        space_id=fixed_id(2, 1),
        channel_id=fixed_id(3, 1),
        thread_id=fixed_id(4, 1),
        resource_kind="message",
        resource_id=fixed_id(8, 1),
        audience_id=audience,
        payload=payload,
        created_at=T0,
    )


def test_personal_types_are_exactly_the_three_addressed_events() -> None:
    assert set(PERSONAL_TYPES) == {
        EventType.AGENT_INVOCATION,
        EventType.AGENT_FOLLOWUP,
        EventType.RUN_CANCEL_REQUESTED,
    }


NULL_PAYLOADS: dict[str, Any] = {
    "top-level": {"a": None},
    "nested-object": {"a": {"b": None}},
    "deeply-nested": {"a": {"b": {"c": {"d": None}}}},
    "in-list": {"a": [1, None]},
    "in-tuple": {"a": (1, None)},
    "object-in-list": {"a": [{"b": 1}, {"c": None}]},
    "list-in-list": {"a": [[None]]},
    "next-to-good-members": {"a": 1, "b": "x", "c": None},
}


@pytest.mark.parametrize("payload", NULL_PAYLOADS.values(), ids=NULL_PAYLOADS.keys())
def test_null_anywhere_in_the_payload_is_refused(payload: Mapping[str, Any]) -> None:
    with pytest.raises(ValueError, match="null"):
        new_event(payload)


def test_null_is_refused_in_personal_events_too() -> None:
    with pytest.raises(ValueError, match="null"):
        new_event({"run": {"id": None}}, event_type=EventType.AGENT_INVOCATION, audience=AUDIENCE)


GOOD_PAYLOADS: dict[str, Any] = {
    "empty": {},
    "false": {"a": False},
    "zero": {"a": 0},
    "empty-string": {"a": ""},
    "empty-list": {"a": []},
    "empty-object": {"a": {}},
    "nested": {"a": {"b": [1, {"c": "d"}]}},
    "string-none": {"a": "None"},
}


@pytest.mark.parametrize("payload", GOOD_PAYLOADS.values(), ids=GOOD_PAYLOADS.keys())
def test_payloads_without_null_are_kept(payload: Mapping[str, Any]) -> None:
    assert new_event(payload).payload == payload


@pytest.mark.parametrize("event_type", sorted(PERSONAL_TYPES), ids=str)
def test_personal_events_need_an_audience(event_type: EventType) -> None:
    with pytest.raises(ValueError, match="audience"):
        new_event({}, event_type=event_type)
    assert new_event({}, event_type=event_type, audience=AUDIENCE).audience_id == AUDIENCE


@pytest.mark.parametrize("event_type", sorted(set(EventType) - PERSONAL_TYPES), ids=str)
def test_shared_events_never_have_an_audience(event_type: EventType) -> None:
    with pytest.raises(ValueError, match="audience"):
        new_event({}, event_type=event_type, audience=AUDIENCE)
    assert new_event({}, event_type=event_type).audience_id is None


def test_stored_events_obey_the_same_rules() -> None:
    common: dict[str, Any] = {
        "actor_id": fixed_id(1, 2),
        "actor_kind": "person",
        "space_id": fixed_id(2, 1),
        "channel_id": fixed_id(3, 1),
        "thread_id": None,
        "resource_kind": "thread",
        "resource_id": fixed_id(5, 1),
        "created_at": T0,
        "seq": 7,
    }
    stored = Event(type=EventType.THREAD_CREATED, payload={"title": "x"}, **common)
    assert stored.seq == 7
    with pytest.raises(ValueError, match="null"):
        Event(type=EventType.THREAD_CREATED, payload={"title": None}, **common)
    with pytest.raises(ValueError, match="audience"):
        Event(type=EventType.AGENT_FOLLOWUP, payload={}, **common)


def _null_somewhere(value: object) -> bool:
    """The rule, written as plainly as possible (the reference of the property below)."""
    if value is None:
        return True
    if isinstance(value, dict):
        return any(_null_somewhere(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_null_somewhere(v) for v in value)
    return False


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=2), inner, max_size=3)
    ),
    max_leaves=12,
)


@given(payload=st.dictionaries(st.text(max_size=2), _JSON, max_size=4))
def test_a_payload_is_refused_exactly_when_it_holds_null_somewhere(
    payload: dict[str, Any],
) -> None:
    if _null_somewhere(payload):
        with pytest.raises(ValueError, match="null"):
            new_event(payload)
    else:
        assert new_event(payload).payload == payload
