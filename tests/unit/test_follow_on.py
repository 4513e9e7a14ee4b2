"""Table tests of `choose_follow_on` (DESIGN section 7: the follow-on run at a run's end).

Alex, Sam and Robin wrote follow-ups of a run of Lotse; each table row says who still
passes agent.invoke and what the choice must be.
"""

from __future__ import annotations

import uuid

import pytest

from tests.support.domain_world import build_world, fixed_id
from turnkeeper.domain.followups import DeniedCandidate, FollowOn, OpenFollowup, choose_follow_on
from turnkeeper.domain.messaging import Origin
from turnkeeper.domain.runs import AgentFacts, FailReason, InvokeFacts, answers_in_thread
from turnkeeper.domain.world import ChannelBehavior, Level

WORLD = build_world()
ALEX = WORLD.principal("alex").id
SAM = WORLD.principal("sam").id
ROBIN = WORLD.principal("robin").id
LOTSE = AgentFacts(id=WORLD.principal("lotse").id)


def facts(author_id: uuid.UUID, level: Level) -> InvokeFacts:
    """agent.invoke facts of an author with a level on the thread."""
    return InvokeFacts(
        origin=Origin.HUMAN,
        author_id=author_id,
        author_level=level,
        channel_archived=False,
        agent=LOTSE,
    )


def followup(n: int, author_id: uuid.UUID) -> OpenFollowup:
    """The n-th follow-up of the run (thread_seq 10 + n)."""
    return OpenFollowup(message_id=fixed_id(9, n), thread_seq=10 + n, author_id=author_id)


A1, S2, A3, R4 = followup(1, ALEX), followup(2, SAM), followup(3, ALEX), followup(4, ROBIN)
DENIED = FailReason.NO_TRIGGER_RIGHT


@pytest.mark.parametrize(
    ("candidates", "levels", "expected"),
    [
        pytest.param((), {}, FollowOn(), id="no candidates"),
        pytest.param(
            (A1, S2, A3),
            {ALEX: Level.TRIGGER, SAM: Level.TRIGGER},
            FollowOn(trigger=A1, moved=(S2, A3)),
            id="the first passes: the rest moves",
        ),
        pytest.param(
            (S2, A1, A3, R4),
            {ALEX: Level.TRIGGER, SAM: Level.READ, ROBIN: Level.READ},
            FollowOn(
                denied=(DeniedCandidate(followup=S2, reason=DENIED),),
                trigger=A1,
                moved=(A3, R4),
            ),
            id="a denied author before the trigger is denied, after it moves",
        ),
        pytest.param(
            (S2, R4),
            {SAM: Level.WRITE, ROBIN: Level.NONE},
            FollowOn(
                denied=(
                    DeniedCandidate(followup=S2, reason=DENIED),
                    DeniedCandidate(followup=R4, reason=DENIED),
                )
            ),
            id="nobody passes: no follow-on run",
        ),
        pytest.param(
            (R4,),
            {ROBIN: Level.TRIGGER},
            FollowOn(trigger=R4),
            id="a single candidate triggers alone",
        ),
    ],
)
def test_choose_follow_on(
    candidates: tuple[OpenFollowup, ...], levels: dict[uuid.UUID, Level], expected: FollowOn
) -> None:
    invoke = {author: facts(author, level) for author, level in levels.items()}
    assert choose_follow_on(candidates, invoke, agent_answers=True) == expected


def test_the_reason_is_the_invoke_rule_of_the_moment() -> None:
    disabled = InvokeFacts(
        origin=Origin.HUMAN,
        author_id=ALEX,
        author_level=Level.TRIGGER,
        channel_archived=False,
        agent=AgentFacts(id=LOTSE.id, enabled=False),
    )
    assert choose_follow_on([A1], {ALEX: disabled}, agent_answers=True) == FollowOn(
        denied=(DeniedCandidate(followup=A1, reason=FailReason.AGENT_NOT_REACHABLE),)
    )


def test_an_author_without_facts_is_a_programming_error() -> None:
    with pytest.raises(KeyError):
        choose_follow_on([A1], {}, agent_answers=True)


def test_an_agent_that_no_longer_answers_in_the_thread_gets_no_follow_on_run() -> None:
    invoke = {ALEX: facts(ALEX, Level.TRIGGER), SAM: facts(SAM, Level.WRITE)}
    assert choose_follow_on([A1, S2], invoke, agent_answers=False) == FollowOn(
        denied=(
            DeniedCandidate(followup=A1, reason=FailReason.AGENT_NOT_ALLOWED_HERE),
            # The author's own loss is the reason it shows first.
            DeniedCandidate(followup=S2, reason=DENIED),
        )
    )


ANSWERS_CASES = [
    ("the-operator", LOTSE.id, False, Level.NONE, True),
    ("an-allowed-guest-with-write", None, True, Level.WRITE, True),
    ("a-guest-the-channel-does-not-allow", None, False, Level.WRITE, False),
    ("an-allowed-guest-without-write", None, True, Level.READ, False),
    ("another-operators-thread", uuid.UUID(int=99), False, Level.WRITE, False),
]


@pytest.mark.parametrize(
    ("operator_id", "allow_guests", "level", "expected"),
    [c[1:] for c in ANSWERS_CASES],
    ids=[c[0] for c in ANSWERS_CASES],
)
def test_answers_in_thread(
    operator_id: uuid.UUID | None, allow_guests: bool, level: Level, expected: bool
) -> None:
    behavior = ChannelBehavior(allow_mentioned_agents=allow_guests)
    assert (
        answers_in_thread(LOTSE.id, operator_id=operator_id, behavior=behavior, agent_level=level)
        is expected
    )
