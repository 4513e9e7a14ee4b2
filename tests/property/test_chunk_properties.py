"""Properties of the chunks of a logical send (`split_content`).

Whatever the text and the budget: no chunk is blank (the server refuses blank content,
so a blank chunk could never be sent), every chunk fits the budget, the same input
gives the same chunks (a retry must find its stored chunks under the same indexes), and
the visible characters all come back in order. Where some split into non-blank chunks
within the budget exists (found by a brute-force search here), joining the chunks gives
the text back.
"""

from __future__ import annotations

from functools import cache

from hypothesis import given
from hypothesis import strategies as st

from turnkeeper.domain.logical_sends import MAX_UTF8_CHAR_BYTES, split_content
from turnkeeper.domain.text import is_blank, is_space, words

#: Whitespace of every kind the server's blank check knows, long runs included.
WHITESPACE = " \n\t\r\u00a0\u2003"
#: Control characters that Python's str methods take for white space and Unicode does not.
SEPARATORS = "\x1c\x1f"
texts = (
    st.text(alphabet=st.sampled_from("ab" + WHITESPACE + SEPARATORS + "ä😀"), max_size=400)
    | st.lists(
        st.sampled_from(["Alex", "Sam", " " * 9, "\n" * 5, "\t", "Robin 😀"]), max_size=40
    ).map("".join)
    | st.text(max_size=400)
)
sizes = st.integers(min_value=MAX_UTF8_CHAR_BYTES, max_value=64)


def visible(text: str) -> str:
    """The text without its white space (what the server's blank check looks for)."""
    return "".join(words(text))


def utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


@given(texts, sizes)
def test_no_chunk_is_blank_and_every_chunk_fits(content: str, size: int) -> None:
    for chunk in split_content(content, size):
        assert not is_blank(chunk)
        assert utf8_size(chunk) <= size


@given(texts, sizes)
def test_the_same_content_gives_the_same_chunks(content: str, size: int) -> None:
    assert split_content(content, size) == split_content(str(content), size)


@given(texts, sizes)
def test_the_visible_characters_come_back_in_order(content: str, size: int) -> None:
    assert visible("".join(split_content(content, size))) == visible(content)


@given(texts, sizes)
def test_whitespace_only_content_has_no_chunks(content: str, size: int) -> None:
    blank = "".join(ch for ch in content if is_space(ch))
    assert split_content(blank, size) == ()


@st.composite
def spaced_words(draw: st.DrawFn) -> tuple[str, int]:
    """Words with whitespace runs between them short enough to share a chunk."""
    size = draw(sizes)
    # A run and the character after it fit one chunk: nothing has to be left out.
    runs = st.text(alphabet=st.sampled_from(" \n\t"), max_size=size - MAX_UTF8_CHAR_BYTES)
    words = st.text(
        alphabet=st.characters(exclude_categories=["Cs"]).filter(lambda ch: not ch.isspace()),
        min_size=1,
        max_size=30,
    )
    pieces = draw(st.lists(st.tuples(runs, words), max_size=20))
    return "".join(run + word for run, word in pieces), size


@given(spaced_words())
def test_chunks_join_to_the_content_when_no_whitespace_must_be_left_out(
    case: tuple[str, int],
) -> None:
    content, size = case
    assert "".join(split_content(content, size)) == content


def some_split_joins(content: str, size: int) -> bool:
    """Whether any split into non-blank chunks within the budget joins back to the content.

    A search over every cut, independent of the split under test.
    """

    @cache
    def rest_splits(start: int) -> bool:
        if start == len(content):
            return True
        return any(
            not is_blank(content[start:end])
            and utf8_size(content[start:end]) <= size
            and rest_splits(end)
            for end in range(start + 1, len(content) + 1)
        )

    return rest_splits(0)


small_texts = st.text(alphabet=st.sampled_from("ab" + WHITESPACE + "ä😀"), max_size=24)


@given(small_texts, st.integers(min_value=MAX_UTF8_CHAR_BYTES, max_value=10))
def test_chunks_join_to_the_content_whenever_some_split_can(content: str, size: int) -> None:
    chunks = split_content(content, size)
    if some_split_joins(content, size):
        assert "".join(chunks) == content
    else:
        assert "".join(chunks) != content


@given(
    st.text(alphabet=st.sampled_from("ab \n"), max_size=24), st.integers(min_value=1, max_value=3)
)
def test_a_budget_below_four_bytes_splits_ascii(content: str, size: int) -> None:
    chunks = split_content(content, size)
    assert all(not is_blank(chunk) and utf8_size(chunk) <= size for chunk in chunks)
    assert visible("".join(chunks)) == visible(content)
