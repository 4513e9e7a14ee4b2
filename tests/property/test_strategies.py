"""The shipped strategies draw only values the domain accepts (the suite relies on it)."""

from __future__ import annotations

from hypothesis import given

from turnkeeper.domain import strategies as ds
from turnkeeper.domain.messaging import Message, MessageKind, Origin
from turnkeeper.domain.runs import Run
from turnkeeper.domain.world import Principal, Thread


@given(ds.messages(), ds.runs(), ds.threads(), ds.people())
def test_drawn_values_satisfy_their_own_rules(
    message: Message, run: Run, thread: Thread, person: Principal
) -> None:
    if message.trigger_state is not None:
        assert message.origin is Origin.HUMAN
    assert (message.kind is MessageKind.RUN) == (message.run_id is not None)
    assert run.version >= 1
    assert not (thread.is_main and thread.operator_agent_id)
    assert not person.is_agent
