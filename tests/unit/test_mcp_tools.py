"""The tools of ``turnkeeper mcp`` without a server: schemas, argument checks and answers.

The schemas are the one source of the tools' rules, so the argument checks are tested
against them in a table; a property shows that no argument value makes the check fail
with anything but `ArgumentError`. The held and partial-held guidance never names a
seq, a key or an id, whatever the thread's title, and sends the model to read from where
this session read (or from the start); a page read after a gap says that it does not
count as read and where to read from instead.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnkeeper.adapters.client import ClientProblem, HistoryMessage, HistoryPage
from turnkeeper.adapters.mcp import texts
from turnkeeper.adapters.mcp.tools import (
    ArgumentError,
    AwaitArgs,
    FinishArgs,
    HistoryArgs,
    SendArgs,
    ToolName,
    ToolSpec,
    WaitArgs,
    parse_arguments,
    tool_specs,
)
from turnkeeper.application.settings import Settings
from turnkeeper.domain.errors import FieldError
from turnkeeper.domain.logical_sends import AcceptedChunk

SETTINGS = Settings()
SPECS = {spec.name: spec for spec in tool_specs(SETTINGS)}
THREAD = "01900000-0000-7000-8000-00000000000d"
RUN = "01900000-0000-7000-8000-00000000001b"


def spec(name: ToolName) -> ToolSpec:
    return SPECS[name]


def test_the_five_tools_are_listed_with_closed_object_schemas() -> None:
    assert list(SPECS) == [
        ToolName.WAIT_FOR_WORK,
        ToolName.READ_HISTORY,
        ToolName.SEND_MESSAGE,
        ToolName.AWAIT_INPUT,
        ToolName.FINISH_RUN,
    ]
    for tool in SPECS.values():
        schema = tool.input_schema
        assert schema["type"] == "object"
        assert schema["additionalProperties"] is False
        assert set(schema.get("required", ())) <= set(schema["properties"])
        for member in schema["properties"].values():
            assert member["description"], tool.name
        assert len(tool.description) > 100, tool.name


def test_the_schemas_carry_the_configured_bounds() -> None:
    settings = Settings(page_max_limit=40, mcp_max_wait=timedelta(seconds=90))
    specs = {s.name: s for s in tool_specs(settings)}
    history = specs[ToolName.READ_HISTORY].input_schema["properties"]
    wait = specs[ToolName.WAIT_FOR_WORK].input_schema["properties"]
    assert history["limit"]["maximum"] == 40
    assert wait["timeout_seconds"]["maximum"] == 90


def test_the_descriptions_send_the_model_to_read_before_it_answers() -> None:
    assert "read_history" in spec(ToolName.SEND_MESSAGE).description
    assert "send_message" in spec(ToolName.READ_HISTORY).description
    assert "finish_run" in spec(ToolName.WAIT_FOR_WORK).description


@pytest.mark.parametrize(
    ("name", "arguments", "parsed"),
    [
        (
            ToolName.SEND_MESSAGE,
            {"target": THREAD, "content": "Done, Alex."},
            SendArgs(target=THREAD, content="Done, Alex."),
        ),
        (
            ToolName.SEND_MESSAGE,
            {"target": THREAD, "content": "\x1f"},
            SendArgs(target=THREAD, content="\x1f"),
        ),
        (ToolName.READ_HISTORY, {"target": THREAD}, HistoryArgs(target=THREAD)),
        (
            ToolName.READ_HISTORY,
            {"target": THREAD, "after_seq": 3, "limit": 500},
            HistoryArgs(target=THREAD, after_seq=3, limit=500),
        ),
        (ToolName.WAIT_FOR_WORK, {}, WaitArgs(timeout=timedelta(seconds=30))),
        (ToolName.WAIT_FOR_WORK, {"timeout_seconds": 0}, WaitArgs(timeout=timedelta(0))),
        (ToolName.AWAIT_INPUT, {"run_id": RUN}, AwaitArgs(run_id=RUN)),
        (
            ToolName.AWAIT_INPUT,
            {"run_id": RUN, "question": "Which account?"},
            AwaitArgs(run_id=RUN, question="Which account?"),
        ),
        (
            ToolName.FINISH_RUN,
            {"run_id": RUN, "state": "failed", "reason": "no access"},
            FinishArgs(run_id=RUN, state="failed", reason="no access"),
        ),
    ],
)
def test_valid_arguments_are_typed(name: ToolName, arguments: dict[str, Any], parsed: Any) -> None:
    assert parse_arguments(spec(name), arguments, SETTINGS) == parsed


@pytest.mark.parametrize(
    ("name", "arguments", "problems"),
    [
        (ToolName.SEND_MESSAGE, {"target": THREAD}, ["content: required"]),
        (
            ToolName.SEND_MESSAGE,
            {"target": "general", "content": "   "},
            ["target: must be an id (a UUID)", "content: must not be empty"],
        ),
        (
            ToolName.SEND_MESSAGE,
            {"target": THREAD, "content": "\u3000"},
            ["content: must not be empty"],
        ),
        (
            ToolName.SEND_MESSAGE,
            {"target": THREAD, "content": "Hi", "run_id": RUN},
            ["run_id: not an argument of this tool"],
        ),
        (ToolName.SEND_MESSAGE, {"target": 7, "content": "Hi"}, ["target: must be a string"]),
        (
            ToolName.READ_HISTORY,
            {"target": THREAD, "limit": 0},
            ["limit: must be an integer from 1 to 500"],
        ),
        (
            ToolName.READ_HISTORY,
            {"target": THREAD, "after_seq": -1},
            ["after_seq: must be an integer of 0 or more"],
        ),
        (
            ToolName.READ_HISTORY,
            {"target": THREAD, "after_seq": True},
            ["after_seq: must be an integer of 0 or more"],
        ),
        (
            ToolName.WAIT_FOR_WORK,
            {"timeout_seconds": 301},
            ["timeout_seconds: must be an integer from 0 to 300"],
        ),
        (
            ToolName.WAIT_FOR_WORK,
            {"timeout_seconds": 1.5},
            ["timeout_seconds: must be an integer from 0 to 300"],
        ),
        (
            ToolName.FINISH_RUN,
            {"run_id": RUN, "state": "done"},
            ["state: must be one of completed, failed, cancelled"],
        ),
        (ToolName.FINISH_RUN, {}, ["run_id: required", "state: required"]),
    ],
)
def test_invalid_arguments_name_every_offending_member(
    name: ToolName, arguments: dict[str, Any], problems: list[str]
) -> None:
    with pytest.raises(ArgumentError) as raised:
        parse_arguments(spec(name), arguments, SETTINGS)
    assert list(raised.value.problems) == problems


@pytest.mark.parametrize(
    "spelling",
    [
        THREAD.upper(),
        "{" + THREAD + "}",
        f"urn:uuid:{THREAD}",
        THREAD.replace("-", ""),
        "{" + THREAD.upper().replace("-", "") + "}",
    ],
)
@pytest.mark.parametrize(
    ("name", "arguments", "parsed"),
    [
        (ToolName.SEND_MESSAGE, {"content": "Hi"}, SendArgs(target=THREAD, content="Hi")),
        (ToolName.READ_HISTORY, {}, HistoryArgs(target=THREAD)),
        (ToolName.AWAIT_INPUT, {}, AwaitArgs(run_id=THREAD)),
        (ToolName.FINISH_RUN, {"state": "completed"}, FinishArgs(run_id=THREAD, state="completed")),
    ],
)
def test_ids_in_any_spelling_are_typed_in_the_canonical_one(
    name: ToolName, arguments: dict[str, Any], parsed: Any, spelling: str
) -> None:
    # The session keys runs and pending sends by the server's (canonical) ids.
    member = "target" if name in (ToolName.SEND_MESSAGE, ToolName.READ_HISTORY) else "run_id"
    assert parse_arguments(spec(name), {member: spelling, **arguments}, SETTINGS) == parsed


def test_the_default_wait_never_exceeds_the_longest() -> None:
    settings = Settings(mcp_wait=timedelta(seconds=120), mcp_max_wait=timedelta(seconds=60))
    specs = {s.name: s for s in tool_specs(settings)}
    parsed = parse_arguments(specs[ToolName.WAIT_FOR_WORK], {}, settings)
    assert parsed == WaitArgs(timeout=timedelta(seconds=60))


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=6,
)


@given(
    name=st.sampled_from(list(ToolName)),
    arguments=st.dictionaries(
        st.sampled_from(
            ["target", "content", "after_seq", "limit", "timeout_seconds", "run_id", "state"]
        )
        | st.text(max_size=8),
        JSON_VALUES,
        max_size=5,
    ),
)
def test_any_arguments_are_typed_or_refused_with_an_argument_error(
    name: ToolName, arguments: dict[str, Any]
) -> None:
    outcome = _parsed_or_refused(spec(name), arguments)
    if isinstance(outcome, ArgumentError):
        assert outcome.problems
    else:
        assert isinstance(outcome, SendArgs | HistoryArgs | WaitArgs | AwaitArgs | FinishArgs)


def _parsed_or_refused(tool: ToolSpec, arguments: dict[str, Any]) -> object:
    try:
        return parse_arguments(tool, arguments, SETTINGS)
    except ArgumentError as error:
        return error


TITLES = st.text(
    alphabet=st.characters(categories=("L", "Zs"), exclude_characters='"'), max_size=30
).map(str.strip)


@given(title=st.none() | TITLES)
def test_held_and_partial_held_guidance_names_no_seq_key_or_id(title: str | None) -> None:
    thread = texts.thread_words(title)
    for guidance in (
        texts.held_text(thread, read_before=True),
        texts.held_text(thread, read_before=False),
        texts.partial_held_text(thread),
    ):
        assert thread in guidance
        # The title is the person's text (Hypothesis drew "seq"): the guidance's own words
        # are judged without it.
        own = guidance.replace(thread, "")
        assert not any(ch.isdigit() for ch in own)
        assert "thread:" not in own
        assert "seq" not in own
        assert "read_history" in own
        assert "send_message" in own


def test_held_guidance_reads_from_where_this_session_read_or_from_the_start() -> None:
    # "Read them" alone sent a model that read after a gap to read after the gap again,
    # for ever: the place to read from is the session's, not the last page it saw.
    thread = texts.thread_words("Eskalation")
    read = texts.held_text(thread, read_before=True)
    unread = texts.held_text(thread, read_before=False)
    assert "after the last message you read there in this session" in read
    assert "after the last message you read there in this session" in (
        texts.partial_held_text(thread)
    )
    assert unread.startswith(
        'Not sent: the thread "Eskalation" has messages you have not read in this session.'
    )
    assert "from its start" in unread


def test_a_thread_without_a_title_is_this_thread() -> None:
    assert texts.thread_words(None) == "this thread"
    assert texts.thread_words("Release plan") == 'the thread "Release plan"'


def _chunk(index: int, *, replayed: bool = False) -> AcceptedChunk:
    return AcceptedChunk(
        index=index,
        client_message_id=f"logical:{index}",
        message_id=f"m{index}",
        accepted_seq=10 + index,
        replayed=replayed,
    )


@pytest.mark.parametrize(
    ("chunks", "text"),
    [
        ([_chunk(0)], f"Sent as message m0 (seq 10) in thread {THREAD}."),
        (
            [_chunk(0, replayed=True)],
            f"Already sent before as message m0 in thread {THREAD}; nothing was posted again.",
        ),
        ([_chunk(0), _chunk(1)], f"Sent in 2 parts in thread {THREAD} (messages m0, m1)."),
        (
            [_chunk(0, replayed=True), _chunk(1), _chunk(2)],
            f"Sent the remaining 2 of 3 parts in thread {THREAD}; the first 1 had been "
            "sent before (messages m0, m1, m2).",
        ),
        (
            [_chunk(0, replayed=True), _chunk(1, replayed=True)],
            "Already sent before in 2 parts (m0, m1); nothing was posted again.",
        ),
    ],
)
def test_the_confirmation_names_the_messages(chunks: list[AcceptedChunk], text: str) -> None:
    assert texts.sent_text(THREAD, chunks) == text


@pytest.mark.parametrize(
    ("problem", "text"),
    [
        (
            ClientProblem(404, "not_found", title="Not found"),
            "Not found (not_found). The thread or run does not exist, or you may not read it.",
        ),
        (
            ClientProblem(403, "forbidden", "level_insufficient", title="Forbidden"),
            "Forbidden (forbidden: level_insufficient). You have no right to do this there.",
        ),
        (
            ClientProblem(429, "rate_limited", title="Too many requests", retry_after=12),
            "Too many requests (rate_limited). Wait 12 seconds, then try again.",
        ),
        (
            ClientProblem(
                400,
                "validation_failed",
                errors=[FieldError(pointer="/run_id", code="run_mismatch")],
                title="Validation failed",
            ),
            "Validation failed (validation_failed). Offending members: /run_id run_mismatch.",
        ),
        (
            ClientProblem(409, "conflict", "run_not_active"),
            "Conflict (conflict: run_not_active). The run has ended: send again to post the "
            "message outside it.",
        ),
    ],
)
def test_a_problem_answer_becomes_its_title_code_and_what_to_do(
    problem: ClientProblem, text: str
) -> None:
    assert texts.problem_text(problem) == text


def test_history_shows_seq_author_and_content_and_offers_the_next_page() -> None:
    at = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    messages = tuple(
        HistoryMessage(
            id=str(uuid.uuid4()),
            thread_id=THREAD,
            thread_seq=seq,
            author_id="a",
            author_kind=kind,
            author_handle=handle,
            origin="human" if kind == "person" else "system",
            kind=message_kind,
            content=content,
            created_at=at,
            run_id=RUN if message_kind == "run" else None,
        )
        for seq, kind, handle, message_kind, content in [
            (4, "person", "alex", "text", "Can you check the invoice?"),
            (5, "agent", "lotse", "run", ""),
        ]
    )
    page = HistoryPage(
        thread_id=THREAD, target_key=f"thread:{THREAD}", messages=messages, covers_through_seq=5
    )
    shown = texts.history_text(page, after_seq=3, page_limit=2)
    assert shown.split("\n\n") == [
        f"Thread {THREAD}: 2 messages after seq 3, read through seq 5.",
        "[seq 4] @alex (person) at 2026-11-30T09:00:00Z:\nCan you check the invoice?",
        f"[seq 5] @lotse (agent, run) at 2026-11-30T09:00:00Z:\n(run {RUN} began here)",
        "There may be more: call read_history again with after_seq 5.",
    ]
    assert "thread:" not in shown


def _page(*seqs: int) -> HistoryPage:
    at = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    messages = tuple(
        HistoryMessage(
            id=str(uuid.uuid4()),
            thread_id=THREAD,
            thread_seq=seq,
            author_id="a",
            author_kind="person",
            author_handle="sam",
            origin="human",
            kind="text",
            content=f"Note {seq}.",
            created_at=at,
        )
        for seq in seqs
    )
    return HistoryPage(
        thread_id=THREAD,
        target_key=f"thread:{THREAD}",
        messages=messages,
        covers_through_seq=max(seqs),
    )


@pytest.mark.parametrize(
    ("read_through", "words"),
    [
        (0, "this session has not read this thread before them"),
        (50, "this session has read this thread only through seq 50"),
    ],
    ids=["new session", "read partly"],
)
def test_a_page_read_after_a_gap_does_not_count_as_read_and_names_where_to_read(
    read_through: int, words: str
) -> None:
    shown = texts.history_text(
        _page(53, 54), after_seq=52, page_limit=2, gap_after=read_through
    ).split("\n\n")
    assert shown[0] == (
        f"Thread {THREAD}: 2 messages after seq 52 (through seq 54), not counted as read."
    )
    note = shown[1]
    assert note.startswith("These messages do not count as read in this session:")
    assert words in note
    assert f"call read_history with after_seq {read_through}, then again" in note
    assert "read through" not in "\n\n".join(shown)
    # The page's own "may be more" would continue after the gap: it is left out.
    assert "There may be more" not in "\n\n".join(shown)
    assert shown[2:] == [
        "[seq 53] @sam (person) at 2026-11-30T09:00:00Z:\nNote 53.",
        "[seq 54] @sam (person) at 2026-11-30T09:00:00Z:\nNote 54.",
    ]


@pytest.mark.parametrize(("seconds", "said"), [(1, "within 1 second."), (30, "within 30 seconds.")])
def test_the_idle_answer_counts_its_seconds_in_words(seconds: int, said: str) -> None:
    assert said in texts.idle_text(seconds)
