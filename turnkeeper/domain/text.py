"""White space and line breaks as Unicode defines them.

Python's `str.isspace`, `str.strip` and `str.splitlines` also count the information
separators U+001C to U+001F as white space, and U+001C to U+001E as line breaks. Unicode
does not (they lack the White_Space property and are no line terminators): they are
control characters, which a message may hold like any other. Every rule that asks
whether a text is blank (content, titles, names, token labels, the chunks of a logical
send), splits it into words (a handle is one) or reads its lines (an agent thread's
title) uses these functions, so that a
blank text means the same everywhere.
"""

from __future__ import annotations

import re

#: The characters with Unicode's White_Space property.
WHITE_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680"
    + "".join(chr(code) for code in range(0x2000, 0x200B))
    + "\u2028\u2029\u202f\u205f\u3000"
)
_SPACE = frozenset(WHITE_SPACE)
_SPACE_RUN = re.compile(f"[{re.escape(WHITE_SPACE)}]+")
# Unicode's line terminators (UAX 14 mandatory breaks, and CR LF as one).
_LINE_BREAK = re.compile("\r\n|[\n\v\f\r\x85\u2028\u2029]")


def is_space(char: str) -> bool:
    """Whether a character is white space (Unicode's White_Space property)."""
    return char in _SPACE


def is_blank(text: str) -> bool:
    """Whether a text is empty or white space only."""
    return not text.strip(WHITE_SPACE)


def stripped(text: str) -> str:
    """The text without the white space at its start and end."""
    return text.strip(WHITE_SPACE)


def lines(text: str) -> list[str]:
    """The lines of a text, split at Unicode's line breaks (CR LF counts as one)."""
    return _LINE_BREAK.split(text)


def words(text: str) -> list[str]:
    """The words of a text: its runs of characters between white space."""
    return [word for word in _SPACE_RUN.split(text) if word]
