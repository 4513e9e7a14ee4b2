"""The title of a new thread: a blank request is none; an agent's auto title is never from a
restricted first message."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnkeeper.domain.messaging import MessageDraft, auto_title, thread_title, title_from_content
from turnkeeper.domain.text import is_blank

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


@pytest.mark.parametrize(
    ("requested", "content", "by_agent", "expected"),
    [
        ("Plans", "Hello", False, "Plans"),
        ("Plans", "Hello", True, "Plans"),
        ("  Plans ", "Hello", False, "  Plans "),
        (None, "Hello", False, None),
        ("", "Hello", False, None),
        ("   ", "Hello", False, None),
        ("\t\n", "Hello", False, None),
        (None, "Weekly report\nall green", True, "Weekly report"),
        ("", "Weekly report\nall green", True, "Weekly report"),
        ("   ", "Weekly report\nall green", True, "Weekly report"),
        ("   ", " \n ", True, None),
        ("\u3000", "Hello", False, None),
        ("\x1f", "Hello", False, "\x1f"),
    ],
)
def test_thread_title(
    requested: str | None, content: str, by_agent: bool, expected: str | None
) -> None:
    draft = MessageDraft(client_msg_id="c", content=content)
    assert thread_title(requested, draft, by_agent=by_agent) == expected


@given(requested=st.none() | st.text(), content=st.text(min_size=1), by_agent=st.booleans())
def test_a_thread_title_is_never_blank_and_a_given_one_is_kept(
    requested: str | None, content: str, by_agent: bool
) -> None:
    title = thread_title(
        requested, MessageDraft(client_msg_id="c", content=content), by_agent=by_agent
    )
    assert title is None or not is_blank(title)
    if requested is not None and not is_blank(requested):
        assert title == requested
    elif not by_agent:
        assert title is None
