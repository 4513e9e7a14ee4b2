"""The owner's body rules: every offending member at once, each with its pointer."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnkeeper.domain.admin_rules import name_errors, operator_errors, principal_errors
from turnkeeper.domain.errors import FieldError
from turnkeeper.domain.text import WHITE_SPACE
from turnkeeper.domain.world import BillingMode, OperatorMode, PrincipalKind

HOLDER = uuid.UUID(int=7)
AGENT = uuid.UUID(int=8)
LIMIT = 12


def fe(pointer: str, code: str) -> FieldError:
    return FieldError(pointer=pointer, code=code)


def errors_of(
    kind: PrincipalKind = PrincipalKind.PERSON,
    handle: str = "alex",
    billing_mode: BillingMode | None = None,
    holder_id: uuid.UUID | None = None,
    supports_followups: bool | None = None,
) -> set[FieldError]:
    return set(
        principal_errors(
            kind=kind,
            handle=handle,
            billing_mode=billing_mode,
            holder_id=holder_id,
            supports_followups=supports_followups,
            max_handle_length=LIMIT,
        )
    )


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({}, set()),
        ({"kind": PrincipalKind.AGENT, "handle": "helper"}, set()),
        ({"kind": PrincipalKind.APP}, {fe("/kind", "invalid_enum")}),
        ({"handle": ""}, {fe("/handle", "invalid")}),
        ({"handle": "alex sam"}, {fe("/handle", "invalid")}),
        ({"handle": "alex\u3000sam"}, {fe("/handle", "invalid")}),
        ({"handle": "\u2028"}, {fe("/handle", "invalid")}),
        # Control characters, not white space: one word.
        ({"handle": "alex\x1fsam"}, set()),
        ({"handle": "a" * (LIMIT + 1)}, {fe("/handle", "too_long")}),
        ({"handle": "a" * LIMIT}, set()),
        ({"billing_mode": BillingMode.PERSONAL}, {fe("/billing_mode", "agents_only")}),
        ({"supports_followups": False}, {fe("/supports_followups", "agents_only")}),
        (
            # Every offending member at once, not only the first one found.
            {"handle": "", "billing_mode": BillingMode.ORGANIZATION, "holder_id": HOLDER},
            {
                fe("/handle", "invalid"),
                fe("/billing_mode", "agents_only"),
                fe("/holder_id", "agents_only"),
            },
        ),
        (
            {"kind": PrincipalKind.AGENT, "billing_mode": BillingMode.PERSONAL},
            {fe("/holder_id", "personal_needs_holder")},
        ),
        (
            {"kind": PrincipalKind.AGENT, "holder_id": HOLDER},
            {fe("/holder_id", "personal_needs_holder")},
        ),
        (
            {
                "kind": PrincipalKind.AGENT,
                "billing_mode": BillingMode.PERSONAL,
                "holder_id": HOLDER,
            },
            set(),
        ),
        (
            {"kind": PrincipalKind.APP, "handle": "two words"},
            {fe("/kind", "invalid_enum"), fe("/handle", "invalid")},
        ),
    ],
)
def test_principal_rules(kwargs: dict[str, object], expected: set[FieldError]) -> None:
    assert errors_of(**kwargs) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("mode", "operator_id", "expected"),
    [
        (OperatorMode.AGENT, AGENT, []),
        (OperatorMode.INHERIT, None, []),
        (OperatorMode.NONE, None, []),
        (OperatorMode.AGENT, None, [fe("/operator_id", "operator_mode_mismatch")]),
        (OperatorMode.NONE, AGENT, [fe("/operator_id", "operator_mode_mismatch")]),
        (OperatorMode.INHERIT, AGENT, [fe("/operator_id", "operator_mode_mismatch")]),
    ],
)
def test_operator_rule(
    mode: OperatorMode, operator_id: uuid.UUID | None, expected: list[FieldError]
) -> None:
    assert operator_errors(mode, operator_id) == expected


@pytest.mark.parametrize(
    ("name", "ok"),
    [("general", True), ("", False), ("  \t", False), ("\u3000", False), ("\x1f", True)],
)
def test_name_rule(name: str, ok: bool) -> None:
    assert name_errors(name) == ([] if ok else [fe("/name", "required")])


@given(
    kind=st.sampled_from(PrincipalKind),
    handle=st.text(max_size=20),
    billing_mode=st.none() | st.sampled_from(BillingMode),
    holder_id=st.none() | st.just(HOLDER),
    supports_followups=st.none() | st.booleans(),
)
def test_principal_rules_accept_exactly_the_valid_requests(
    kind: PrincipalKind,
    handle: str,
    billing_mode: BillingMode | None,
    holder_id: uuid.UUID | None,
    supports_followups: bool | None,
) -> None:
    found = errors_of(kind, handle, billing_mode, holder_id, supports_followups)
    # A NUL is refused in every text member (invalid_character), handles included.
    # One word: no white space (Unicode's) but around it.
    inner = handle.strip(WHITE_SPACE)
    one_word = bool(inner) and not any(c in WHITE_SPACE for c in inner) and "\x00" not in handle
    if kind is PrincipalKind.AGENT:
        personal = billing_mode is BillingMode.PERSONAL
        valid = one_word and len(handle) <= LIMIT and personal == (holder_id is not None)
    else:
        no_agent_members = billing_mode is None and holder_id is None and supports_followups is None
        valid = kind is PrincipalKind.PERSON and one_word and len(handle) <= LIMIT
        valid = valid and no_agent_members
    assert (found == set()) == valid
    # Each error names one member, at most once.
    assert len({e.pointer for e in found}) == len(found)
