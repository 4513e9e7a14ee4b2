"""Blank text and lines as Unicode defines them: the information separators U+001C to
U+001F are control characters, neither white space nor line breaks (Python's str methods
count them as both)."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnkeeper.domain.text import WHITE_SPACE, is_blank, is_space, lines, stripped, words

#: The information separators: Python's isspace says True, Unicode's White_Space no.
SEPARATORS = "\x1c\x1d\x1e\x1f"


@pytest.mark.parametrize(
    ("text", "blank"),
    [
        ("", True),
        (" \t\n\r\v\f", True),
        ("\x85\xa0\u1680\u2000\u200a\u2028\u2029\u202f\u205f\u3000", True),
        ("\x1f", False),
        (" \x1c ", False),
        ("\u200b", False),
        ("\u180e", False),
        ("Sam", False),
    ],
)
def test_is_blank(text: str, blank: bool) -> None:
    assert is_blank(text) is blank


def test_white_space_is_pythons_less_the_information_separators() -> None:
    python = {chr(code) for code in range(sys.maxunicode + 1) if chr(code).isspace()}
    assert set(WHITE_SPACE) == python - set(SEPARATORS)
    assert all(not is_space(char) for char in SEPARATORS)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Alex\nSam", ["Alex", "Sam"]),
        ("Alex\r\nSam", ["Alex", "Sam"]),
        ("Alex\u2028Sam\x85Robin", ["Alex", "Sam", "Robin"]),
        ("Alex\x1cSam\x1d\x1e", ["Alex\x1cSam\x1d\x1e"]),
        ("Alex\n", ["Alex", ""]),
    ],
)
def test_lines(text: str, expected: list[str]) -> None:
    assert lines(text) == expected


@given(st.text())
def test_blank_means_nothing_left_after_stripping(text: str) -> None:
    assert is_blank(text) == (stripped(text) == "")
    assert is_blank(text) == all(is_space(char) for char in text)
    assert stripped(stripped(text)) == stripped(text)
    # Python's rule differs only by the separators.
    if not any(char in SEPARATORS for char in text):
        assert is_blank(text) == (not text.strip())


@given(st.text())
def test_lines_join_back_to_the_text_without_its_breaks(text: str) -> None:
    assert "".join(lines(text)) == "".join(
        char for char in text.replace("\r\n", "") if char not in "\n\v\f\r\x85\u2028\u2029"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", []),
        ("  Alex\u3000 Sam\n", ["Alex", "Sam"]),
        ("Alex\x1fSam", ["Alex\x1fSam"]),
    ],
)
def test_words(text: str, expected: list[str]) -> None:
    assert words(text) == expected


@given(st.text())
def test_words_are_what_python_splits_apart_from_the_separators(text: str) -> None:
    if not any(char in SEPARATORS for char in text):
        assert words(text) == text.split()
    assert all(not any(is_space(char) for char in word) and word for word in words(text))
