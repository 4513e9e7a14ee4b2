"""The chunks of a logical send around whitespace: never blank, always within the budget.

The server refuses blank content, so a whitespace-only chunk could never be sent and its
logical send never completed (every retry stops at it). The chunks join back to the
content whenever some split into non-blank chunks can; only when none can is whitespace
that cannot share a chunk with a visible character left out, and the rest comes back as
it was. The split is the same on every retry, so that a chunk's index names the same text.
"""

from __future__ import annotations

import pytest

from turnkeeper.domain.logical_sends import chunk_client_message_id, split_content
from turnkeeper.domain.text import is_blank

WHITESPACE_CASES = [
    ("a run longer than a chunk", "Hi" + " " * 9 + "Sam", 4, ("Hi  ", "Sam")),
    ("a run as long as a chunk", "Alex" + " " * 4 + "Sam", 4, ("Ale", "x   ", " Sam")),
    ("a run between cut words", "aaaa    bbbb", 4, ("aaa", "a   ", " bbb", "b")),
    (
        "the rest of a run starts the next chunk",
        "Alex" + " " * 10 + "Sam",
        8,
        ("Alex    ", "      Sa", "m"),
    ),
    (
        "newlines longer than a chunk",
        "Alex\n\n\n\n\n\nSam",
        4,
        ("Ale", "x\n\n\n", "\n\n\nS", "am"),
    ),
    ("leading run longer than a chunk", " " * 6 + "Robin", 4, ("Robi", "n")),
    ("trailing whitespace after a full chunk", "Alex  ", 4, ("Ale", "x  ")),
    (
        "trailing newlines after a full chunk of words",
        "word " * 3 + "\n\n",
        10,
        ("word word ", "word \n\n"),
    ),
    (
        "indentation after a full chunk",
        "line one\n" + " " * 12 + "indented code",
        10,
        ("line ", "one\n      ", "      inde", "nted code"),
    ),
    ("trailing run longer than a chunk", "Sam" + "\t" * 9, 4, ("Sam\t",)),
    ("unicode whitespace", "Sam" + "\u2003" * 4 + "Alex", 4, ("Sam", "Alex")),
    ("whitespace only", " \n\t  \n", 4, ()),
    ("information separators are visible", "\x1f" * 6, 4, ("\x1f" * 4, "\x1f" * 2)),
    ("a short run stays whole", "Sam   Alex", 8, ("Sam   ", "Alex")),
    ("a run inside the budget", "Robin \n Sam", 16, ("Robin \n Sam",)),
]


@pytest.mark.parametrize(
    ("content", "size", "chunks"),
    [case[1:] for case in WHITESPACE_CASES],
    ids=[case[0] for case in WHITESPACE_CASES],
)
def test_whitespace_never_makes_a_chunk_of_its_own(
    content: str, size: int, chunks: tuple[str, ...]
) -> None:
    split = split_content(content, size)
    assert split == chunks
    assert not any(is_blank(chunk) for chunk in split)
    assert all(len(chunk.encode("utf-8")) <= size for chunk in split)


def test_a_retry_splits_the_same_content_into_the_same_numbered_chunks() -> None:
    content = "Alex, the invoice" + " " * 40 + "is paid.\n\n\n\n\n\n\nSam"
    first = split_content(content, 8)
    retry = split_content(content, 8)
    assert retry == first
    ids = [chunk_client_message_id("reply-7", index) for index in range(len(first))]
    assert ids == [f"reply-7:{index}" for index in range(len(retry))]
    assert "".join("".join(first).split()) == "".join(content.split())
