"""The answer structs show a resource exactly as the application's payloads show it.

A message, a thread and a run reach clients two ways: as an HTTP answer, built from the
domain value by `turnkeeper.adapters.http.answers`, and inside what the application
builds itself (event payloads, the ``current`` run of a base_version_conflict). For
every value the domain strategies draw, both JSON texts must be the same.
"""

from __future__ import annotations

import json
from typing import Any

import attrs
import msgspec
from hypothesis import given
from hypothesis import strategies as st

from turnkeeper.adapters.http.answers import Message, Thread
from turnkeeper.adapters.http.run_answers import Run
from turnkeeper.application.documents import message_document, thread_document
from turnkeeper.application.services.runs import RunView, run_document
from turnkeeper.domain import strategies as tks
from turnkeeper.domain import world
from turnkeeper.domain.messaging import Message as DomainMessage
from turnkeeper.domain.runs import Run as DomainRun


def _json(answer: msgspec.Struct) -> Any:
    return json.loads(msgspec.json.encode(answer))


@st.composite
def _messages(draw: st.DrawFn) -> DomainMessage:
    # The domain strategy leaves out the members only a create request sets.
    return attrs.evolve(
        draw(tks.messages()),
        client_msg_id=draw(st.none() | st.text(max_size=8)),
        reply_to_id=draw(st.none() | tks.message_ids),
        restricted_to=draw(st.none() | st.lists(tks.person_ids, min_size=1, max_size=2).map(tuple)),
    )


@given(message=_messages(), author=st.one_of(tks.people(), tks.agents()))
def test_a_message_answers_as_its_event_payload_shows_it(
    message: DomainMessage, author: world.Principal
) -> None:
    assert _json(Message.of(message, author)) == message_document(message, author)


@given(thread=tks.threads())
def test_a_thread_answers_as_its_event_payload_shows_it(thread: world.Thread) -> None:
    assert _json(Thread.of(thread)) == thread_document(thread)


@given(
    run=tks.runs(),
    followups=st.dictionaries(tks.message_ids, tks.followup_states.map(str), max_size=3),
)
def test_a_run_answers_as_a_conflict_shows_it(run: DomainRun, followups: dict[Any, str]) -> None:
    view = RunView(run=run, followups=followups)
    assert _json(Run.of(view)) == run_document(view)
