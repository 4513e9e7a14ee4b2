"""A run patch's op path names a follow-up by the canonical spelling of its id only."""

from __future__ import annotations

import uuid

import pytest

from turnkeeper.adapters.http.requests import RunPatchOp

#: An id with letters in it, so that its capitals differ from it.
MESSAGE_ID = uuid.UUID("01a24da5-4106-7f21-826f-186bb6c20c57")


def _target(path: str) -> uuid.UUID | None:
    op = RunPatchOp(op="replace", path=path, value="delivered")
    return op.followup_op().message_id


def test_the_canonical_spelling_names_the_follow_up() -> None:
    assert _target(f"/followups/{MESSAGE_ID}/state") == MESSAGE_ID


@pytest.mark.parametrize(
    "spelling",
    [
        str(MESSAGE_ID).upper(),
        MESSAGE_ID.hex,
        f"{{{MESSAGE_ID}}}",
        MESSAGE_ID.urn,
        f"{MESSAGE_ID.hex[:3]}-{MESSAGE_ID.hex[3:]}",
    ],
    ids=["capitals", "no-hyphens", "braces", "urn", "hyphen-moved"],
)
def test_another_spelling_names_no_follow_up(spelling: str) -> None:
    assert _target(f"/followups/{spelling}/state") is None
