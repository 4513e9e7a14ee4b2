"""The auto title of an agent's thread never comes from a restricted first message."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnkeeper.domain.messaging import MessageDraft, auto_title, title_from_content

ALEX = uuid.UUID(int=1)


@pytest.mark.parametrize(
    ("content", "restricted_to", "expected"),
    [
        ("Weekly report\nall green", None, "Weekly report"),
        ("\n  Weekly report  \n", None, "Weekly report"),
        ("Secret for Alex\nonly", (ALEX,), None),
        ("Secret for nobody else", (), None),
    ],
)
def test_auto_title(
    content: str, restricted_to: tuple[uuid.UUID, ...] | None, expected: str | None
) -> None:
    draft = MessageDraft(client_msg_id="c", content=content, restricted_to=restricted_to)
    assert auto_title(draft) == expected


@given(
    content=st.text(min_size=1),
    audience=st.none() | st.lists(st.uuids(), max_size=3).map(tuple),
)
def test_a_restricted_message_never_gives_a_title(
    content: str, audience: tuple[uuid.UUID, ...] | None
) -> None:
    title = auto_title(MessageDraft(client_msg_id="c", content=content, restricted_to=audience))
    if audience is None:
        assert title == title_from_content(content)
    else:
        assert title is None
