"""Table tests of `authorize` and `effective_level` over the DESIGN section 11 world."""

from __future__ import annotations

import attrs
import pytest

from tests.support.domain_world import T0, World, build_world, fixed_id
from turnkeeper.domain.authorization import (
    ALLOW,
    Action,
    Decision,
    DenyReason,
    authorize,
    effective_level,
)
from turnkeeper.domain.world import Level, OperatorMode, Principal, PrincipalKind, thread_operator

WORLD = build_world()

NOT_FOUND = Decision(allowed=False, code="not_found", reason=DenyReason.NO_GRANT)
FORBIDDEN = Decision(allowed=False, code="forbidden", reason=DenyReason.LEVEL_INSUFFICIENT)
READ_ONLY = Decision(allowed=False, code="channel_read_only", reason=DenyReason.CHANNEL_ARCHIVED)

READ, WRITE, TRIGGER, NONE = Level.READ, Level.WRITE, Level.TRIGGER, Level.NONE

ALL_ACTIONS = list(Action)
WRITE_ACTIONS = [a for a in Action if a.required_level > Level.READ]
READ_ACTIONS = [a for a in Action if a.required_level == Level.READ]

EVERY_TARGET = [
    "Allgemein",
    "Allgemein/main",
    "Allgemein/side",
    "Eskalation",
    "Eskalation/main",
    "Eskalation/case",
    "Reports",
    "Reports/weekly",
    "Bulletin",
    "Bulletin/post",
    "Kampagnen",
    "Kampagnen/main",
    "Kampagnen/legacy",
    "Ideas",
    "Ideas/idea",
    "Notizen",
    "Notizen/main",
    "Notizen/todo",
]


def decide(world: World, handle: str, action: Action, where: str) -> Decision:
    return authorize(world.principal(handle), action, world.target(where), world.grants_of(handle))


def level_of(world: World, handle: str, where: str) -> Level:
    return effective_level(world.principal(handle), world.target(where), world.grants_of(handle))


# --- the required levels themselves ---------------------------------------------------


@pytest.mark.parametrize(
    ("action", "level"),
    [
        (Action.CHANNEL_READ, READ),
        (Action.THREAD_READ, READ),
        (Action.THREAD_CREATE, WRITE),
        (Action.MESSAGE_CREATE, WRITE),
        (Action.THREAD_CLOSE, WRITE),
        (Action.RUN_CANCEL, TRIGGER),
    ],
    ids=lambda v: str(v),
)
def test_each_action_needs_its_level(action: Action, level: Level) -> None:
    assert action.required_level is level


# --- effective_level ------------------------------------------------------------------

LEVEL_CASES = [
    # The owner has every level everywhere.
    *[("robin", where, TRIGGER) for where in EVERY_TARGET],
    # Alex: trigger on space Support, inherited by every Support channel and thread.
    ("alex", "Allgemein", TRIGGER),
    ("alex", "Allgemein/main", TRIGGER),
    ("alex", "Eskalation/case", TRIGGER),
    ("alex", "Reports", TRIGGER),
    ("alex", "Reports/weekly", TRIGGER),
    ("alex", "Bulletin/post", TRIGGER),
    ("alex", "Kampagnen", NONE),
    ("alex", "Ideas/idea", NONE),
    ("alex", "Notizen/main", NONE),
    # Sam: read on Allgemein only in Support, trigger on space Marketing.
    ("sam", "Allgemein", READ),
    ("sam", "Allgemein/main", READ),
    ("sam", "Allgemein/side", READ),
    ("sam", "Eskalation", NONE),
    ("sam", "Reports", NONE),
    ("sam", "Kampagnen", TRIGGER),
    ("sam", "Kampagnen/main", TRIGGER),
    ("sam", "Ideas/idea", TRIGGER),
    ("sam", "Notizen", NONE),
    # Texter: write grant on Allgemein; operator of Marketing (inherit).
    ("texter", "Allgemein", WRITE),
    ("texter", "Allgemein/main", WRITE),
    ("texter", "Eskalation", NONE),
    ("texter", "Bulletin", NONE),
    ("texter", "Kampagnen", WRITE),
    ("texter", "Kampagnen/main", WRITE),
    ("texter", "Ideas", WRITE),
    ("texter", "Ideas/idea", WRITE),
    # Kampagnen/legacy has a fixed operator Lotse; Texter is not fixed there.
    ("texter", "Kampagnen/legacy", NONE),
    # Lotse: default operator of Support; Reports (mode none) only through its grant.
    ("lotse", "Allgemein", WRITE),
    ("lotse", "Allgemein/main", WRITE),
    ("lotse", "Allgemein/side", WRITE),
    ("lotse", "Eskalation", WRITE),
    ("lotse", "Eskalation/main", WRITE),
    ("lotse", "Reports", WRITE),
    ("lotse", "Reports/weekly", WRITE),
    ("lotse", "Bulletin", WRITE),
    ("lotse", "Bulletin/post", WRITE),
    ("lotse", "Kampagnen", NONE),
    ("lotse", "Kampagnen/main", NONE),
    # A thread's fixed operator has write on that thread only.
    ("lotse", "Kampagnen/legacy", WRITE),
    ("lotse", "Notizen", NONE),
    # Assistent: operator of Research, nothing elsewhere.
    ("assistent", "Notizen", WRITE),
    ("assistent", "Notizen/main", WRITE),
    ("assistent", "Notizen/todo", WRITE),
    ("assistent", "Allgemein", NONE),
    ("assistent", "Kampagnen", NONE),
]


@pytest.mark.parametrize(
    ("handle", "where", "expected"),
    LEVEL_CASES,
    ids=[f"{h}@{w}={e.label}" for h, w, e in LEVEL_CASES],
)
def test_effective_level_in_the_test_world(handle: str, where: str, expected: Level) -> None:
    assert level_of(WORLD, handle, where) is expected


def test_lotse_without_its_reports_grant_has_nothing_in_reports() -> None:
    world = WORLD.without_grants_of("lotse")
    assert level_of(world, "lotse", "Reports") is NONE
    assert level_of(world, "lotse", "Reports/weekly") is NONE
    # Its operator rights elsewhere do not come from grants.
    assert level_of(world, "lotse", "Allgemein/main") is WRITE
    assert level_of(world, "lotse", "Bulletin") is WRITE


@pytest.mark.parametrize(
    ("resource", "granted"),
    [("Support", TRIGGER), ("Eskalation", TRIGGER), ("Eskalation", WRITE), ("Eskalation", READ)],
    ids=["space-trigger", "channel-trigger", "channel-write", "channel-read"],
)
def test_agents_are_capped_at_write_even_with_a_trigger_grant(
    resource: str, granted: Level
) -> None:
    world = WORLD.with_grants([WORLD.grant("texter", resource, granted)])
    assert level_of(world, "texter", "Eskalation/main") is min(granted, WRITE)


def test_a_person_keeps_trigger_from_a_grant() -> None:
    world = WORLD.with_grants([WORLD.grant("sam", "Eskalation", TRIGGER)])
    assert level_of(world, "sam", "Eskalation/main") is TRIGGER


def test_the_highest_grant_wins_between_space_and_channel() -> None:
    world = WORLD.with_grants([WORLD.grant("alex", "Allgemein", READ)])
    assert level_of(world, "alex", "Allgemein/main") is TRIGGER


def test_grants_of_other_principals_are_ignored() -> None:
    alex = WORLD.principal("alex")
    target = WORLD.target("Kampagnen/main")
    assert effective_level(alex, target, WORLD.grants) is NONE
    assert effective_level(WORLD.principal("sam"), target, WORLD.grants) is TRIGGER


# --- the main thread follows the channel's current operator -----------------------------


def test_operator_change_moves_write_on_the_main_thread_but_not_on_fixed_threads() -> None:
    world = WORLD.with_channel(
        "Eskalation", operator_mode=OperatorMode.AGENT, operator_id=WORLD.principal("texter").id
    )
    # Lotse loses the channel and its main thread ...
    assert level_of(world, "lotse", "Eskalation") is NONE
    assert level_of(world, "lotse", "Eskalation/main") is NONE
    assert decide(world, "lotse", Action.MESSAGE_CREATE, "Eskalation/main") == NOT_FOUND
    # ... but keeps the thread it was fixed on at creation.
    assert level_of(world, "lotse", "Eskalation/case") is WRITE
    assert decide(world, "lotse", Action.MESSAGE_CREATE, "Eskalation/case") is ALLOW
    # Texter gains the channel and the main thread, not the fixed thread.
    assert level_of(world, "texter", "Eskalation") is WRITE
    assert level_of(world, "texter", "Eskalation/main") is WRITE
    assert decide(world, "texter", Action.MESSAGE_CREATE, "Eskalation/main") is ALLOW
    assert level_of(world, "texter", "Eskalation/case") is NONE


@pytest.mark.parametrize(
    ("where", "operator"),
    [
        ("Eskalation/main", "texter"),  # the main thread follows the channel
        ("Eskalation/case", "lotse"),  # a thread keeps its operator of creation
        ("Reports/weekly", None),  # a thread created without an operator
    ],
)
def test_thread_operator_after_the_channel_moved_to_texter(
    where: str, operator: str | None
) -> None:
    world = WORLD.with_channel(
        "Eskalation", operator_mode=OperatorMode.AGENT, operator_id=WORLD.principal("texter").id
    )
    target = world.target(where)
    assert target.thread is not None
    expected = None if operator is None else world.principal(operator).id
    assert thread_operator(target.thread, target.channel, target.space) == expected


def test_operator_mode_none_takes_write_from_the_default_operator() -> None:
    world = WORLD.with_channel("Eskalation", operator_mode=OperatorMode.NONE)
    assert level_of(world, "lotse", "Eskalation") is NONE
    assert level_of(world, "lotse", "Eskalation/main") is NONE
    assert level_of(world, "lotse", "Eskalation/case") is WRITE


def test_changing_the_space_default_operator_moves_inheriting_channels() -> None:
    texter = WORLD.principal("texter")
    spaces = dict(WORLD.spaces)
    spaces["Support"] = attrs.evolve(spaces["Support"], default_operator_id=texter.id)
    world = attrs.evolve(WORLD, spaces=spaces)
    assert level_of(world, "texter", "Bulletin") is WRITE
    assert level_of(world, "lotse", "Bulletin") is NONE
    assert level_of(world, "lotse", "Bulletin/post") is WRITE
    # Reports is in mode none: the default operator does not matter there.
    assert level_of(world, "texter", "Reports") is NONE


# --- authorize ------------------------------------------------------------------------

DECISION_CASES: list[tuple[str, Action, str, Decision]] = [
    # Owner: everything, everywhere.
    *[("robin", a, w, ALLOW) for a in ALL_ACTIONS for w in ("Allgemein/main", "Reports/weekly")],
    *[("robin", a, w, ALLOW) for a in ALL_ACTIONS for w in ("Ideas/idea", "Notizen/todo")],
    # Alex: trigger on Support channels, nothing in Marketing or Research.
    *[("alex", a, "Allgemein/main", ALLOW) for a in ALL_ACTIONS],
    *[("alex", a, "Reports/weekly", ALLOW) for a in ALL_ACTIONS],
    ("alex", Action.THREAD_CREATE, "Bulletin", ALLOW),
    *[("alex", a, "Kampagnen/main", NOT_FOUND) for a in ALL_ACTIONS],
    ("alex", Action.CHANNEL_READ, "Ideas", NOT_FOUND),
    ("alex", Action.THREAD_READ, "Notizen/main", NOT_FOUND),
    # Sam: read on Allgemein (write refused), trigger on Marketing.
    ("sam", Action.CHANNEL_READ, "Allgemein", ALLOW),
    ("sam", Action.THREAD_READ, "Allgemein/main", ALLOW),
    ("sam", Action.THREAD_READ, "Allgemein/side", ALLOW),
    ("sam", Action.MESSAGE_CREATE, "Allgemein/main", FORBIDDEN),
    ("sam", Action.THREAD_CREATE, "Allgemein", FORBIDDEN),
    ("sam", Action.THREAD_CLOSE, "Allgemein/side", FORBIDDEN),
    ("sam", Action.RUN_CANCEL, "Allgemein/main", FORBIDDEN),
    ("sam", Action.CHANNEL_READ, "Eskalation", NOT_FOUND),
    ("sam", Action.MESSAGE_CREATE, "Eskalation/main", NOT_FOUND),
    *[("sam", a, "Kampagnen/main", ALLOW) for a in ALL_ACTIONS],
    *[("sam", a, "Ideas/idea", ALLOW) for a in ALL_ACTIONS],
    # Texter: write on Allgemein, never people-only actions.
    ("texter", Action.MESSAGE_CREATE, "Allgemein/main", ALLOW),
    ("texter", Action.THREAD_CREATE, "Allgemein", ALLOW),
    ("texter", Action.THREAD_READ, "Allgemein/side", ALLOW),
    ("texter", Action.THREAD_CLOSE, "Allgemein/side", FORBIDDEN),
    ("texter", Action.RUN_CANCEL, "Allgemein/main", FORBIDDEN),
    ("texter", Action.CHANNEL_READ, "Eskalation", NOT_FOUND),
    ("texter", Action.MESSAGE_CREATE, "Kampagnen/main", ALLOW),
    ("texter", Action.THREAD_CLOSE, "Kampagnen/main", FORBIDDEN),
    ("texter", Action.MESSAGE_CREATE, "Ideas/idea", ALLOW),
    # Lotse: operator of Support's inheriting channels, Reports through its grant.
    ("lotse", Action.MESSAGE_CREATE, "Allgemein/main", ALLOW),
    ("lotse", Action.MESSAGE_CREATE, "Allgemein/side", ALLOW),
    ("lotse", Action.THREAD_CREATE, "Allgemein", ALLOW),
    ("lotse", Action.MESSAGE_CREATE, "Eskalation/main", ALLOW),
    ("lotse", Action.THREAD_CREATE, "Reports", ALLOW),
    ("lotse", Action.MESSAGE_CREATE, "Reports/weekly", ALLOW),
    ("lotse", Action.THREAD_CREATE, "Bulletin", ALLOW),
    ("lotse", Action.MESSAGE_CREATE, "Bulletin/post", ALLOW),
    ("lotse", Action.THREAD_CLOSE, "Allgemein/side", FORBIDDEN),
    ("lotse", Action.RUN_CANCEL, "Allgemein/main", FORBIDDEN),
    ("lotse", Action.CHANNEL_READ, "Kampagnen", NOT_FOUND),
    ("lotse", Action.MESSAGE_CREATE, "Kampagnen/main", NOT_FOUND),
    ("lotse", Action.MESSAGE_CREATE, "Kampagnen/legacy", ALLOW),
    ("lotse", Action.THREAD_READ, "Kampagnen/legacy", ALLOW),
    ("lotse", Action.THREAD_READ, "Notizen/todo", NOT_FOUND),
    # Assistent: operator of Research only.
    ("assistent", Action.MESSAGE_CREATE, "Notizen/main", ALLOW),
    ("assistent", Action.RUN_CANCEL, "Notizen/main", FORBIDDEN),
    ("assistent", Action.CHANNEL_READ, "Allgemein", NOT_FOUND),
]


@pytest.mark.parametrize(
    ("handle", "action", "where", "expected"),
    DECISION_CASES,
    ids=[f"{h}-{a.value}@{w}" for h, a, w, _ in DECISION_CASES],
)
def test_authorize_in_the_test_world(
    handle: str, action: Action, where: str, expected: Decision
) -> None:
    assert decide(WORLD, handle, action, where) == expected


def test_lotse_without_its_reports_grant_gets_not_found_in_reports() -> None:
    world = WORLD.without_grants_of("lotse")
    assert decide(world, "lotse", Action.THREAD_CREATE, "Reports") == NOT_FOUND
    assert decide(world, "lotse", Action.THREAD_READ, "Reports/weekly") == NOT_FOUND


@pytest.mark.parametrize("action", [Action.RUN_CANCEL, Action.THREAD_CLOSE], ids=str)
def test_an_agent_with_a_trigger_grant_still_may_not_take_people_only_actions(
    action: Action,
) -> None:
    world = WORLD.with_grants([WORLD.grant("texter", "Allgemein", TRIGGER)])
    assert level_of(world, "texter", "Allgemein/main") is WRITE
    assert decide(world, "texter", action, "Allgemein/main") == FORBIDDEN


def test_an_app_with_a_trigger_grant_may_not_take_people_only_actions() -> None:
    app = Principal(id=fixed_id(1, 50), kind=PrincipalKind.APP, handle="importer", created_at=T0)
    grant = attrs.evolve(WORLD.grant("alex", "Support", TRIGGER), principal_id=app.id)
    target = WORLD.target("Allgemein/main")
    assert effective_level(app, target, [grant]) is TRIGGER
    assert authorize(app, Action.MESSAGE_CREATE, target, [grant]) is ALLOW
    assert authorize(app, Action.RUN_CANCEL, target, [grant]) == FORBIDDEN
    assert authorize(app, Action.THREAD_CLOSE, target, [grant]) == FORBIDDEN
    assert authorize(app, Action.CHANNEL_READ, target, []) == NOT_FOUND


def test_run_cancel_needs_trigger_and_write_is_not_enough() -> None:
    world = WORLD.with_grants([WORLD.grant("sam", "Eskalation", WRITE)])
    assert decide(world, "sam", Action.MESSAGE_CREATE, "Eskalation/main") is ALLOW
    assert decide(world, "sam", Action.THREAD_CLOSE, "Eskalation/main") is ALLOW
    assert decide(world, "sam", Action.RUN_CANCEL, "Eskalation/main") == FORBIDDEN


# --- archived channels ----------------------------------------------------------------

ARCHIVED = WORLD.with_channel("Allgemein", archived=True)

ARCHIVED_CASES: list[tuple[str, Action, str, Decision]] = [
    *[("robin", a, "Allgemein/main", READ_ONLY) for a in WRITE_ACTIONS],
    *[("robin", a, "Allgemein/main", ALLOW) for a in READ_ACTIONS],
    *[("alex", a, "Allgemein/main", READ_ONLY) for a in WRITE_ACTIONS],
    *[("alex", a, "Allgemein/side", ALLOW) for a in READ_ACTIONS],
    ("alex", Action.THREAD_CREATE, "Allgemein", READ_ONLY),
    # The operator of the channel and the fixed operator of a thread are read-only too.
    ("lotse", Action.MESSAGE_CREATE, "Allgemein/main", READ_ONLY),
    ("lotse", Action.MESSAGE_CREATE, "Allgemein/side", READ_ONLY),
    ("lotse", Action.THREAD_CREATE, "Allgemein", READ_ONLY),
    ("lotse", Action.THREAD_READ, "Allgemein/main", ALLOW),
    ("texter", Action.MESSAGE_CREATE, "Allgemein/main", READ_ONLY),
    # A reader gets the archive answer rather than level_insufficient.
    ("sam", Action.MESSAGE_CREATE, "Allgemein/main", READ_ONLY),
    ("sam", Action.THREAD_READ, "Allgemein/main", ALLOW),
    # Without read: not_found, the archive is not revealed.
    ("assistent", Action.MESSAGE_CREATE, "Allgemein/main", NOT_FOUND),
    ("assistent", Action.CHANNEL_READ, "Allgemein", NOT_FOUND),
    # Other channels are untouched.
    ("alex", Action.MESSAGE_CREATE, "Eskalation/main", ALLOW),
    ("lotse", Action.MESSAGE_CREATE, "Eskalation/main", ALLOW),
]


@pytest.mark.parametrize(
    ("handle", "action", "where", "expected"),
    ARCHIVED_CASES,
    ids=[f"{h}-{a.value}@{w}" for h, a, w, _ in ARCHIVED_CASES],
)
def test_authorize_in_an_archived_channel(
    handle: str, action: Action, where: str, expected: Decision
) -> None:
    assert decide(ARCHIVED, handle, action, where) == expected


def test_archiving_keeps_the_levels_and_only_refuses_writing() -> None:
    assert level_of(ARCHIVED, "alex", "Allgemein/main") is TRIGGER
    assert level_of(ARCHIVED, "lotse", "Allgemein/main") is WRITE


# --- not_found is one answer ----------------------------------------------------------

NO_READ_CASES = [
    (handle, action, where)
    for handle, where in [
        ("alex", "Kampagnen"),
        ("alex", "Notizen/todo"),
        ("sam", "Eskalation/case"),
        ("sam", "Reports"),
        ("texter", "Bulletin/post"),
        ("lotse", "Ideas/idea"),
        ("assistent", "Allgemein/main"),
    ]
    for action in ALL_ACTIONS
]


@pytest.mark.parametrize(
    ("handle", "action", "where"),
    NO_READ_CASES,
    ids=[f"{h}-{a.value}@{w}" for h, a, w in NO_READ_CASES],
)
def test_without_read_every_answer_is_the_same_not_found(
    handle: str, action: Action, where: str
) -> None:
    decision = decide(WORLD, handle, action, where)
    assert decision == NOT_FOUND
    assert (decision.allowed, decision.code, decision.reason) == (False, "not_found", "no_grant")
