"""The runs use cases, one job per module (DESIGN.md sections 5 to 7).

- `trigger` and `answers`: the in-transaction subscribers of `MessagePosted` (the
  trigger decision of human messages; the run_id check of agent answers);
- `opening`: the one way a run opens; `run_end`: the one end-of-run function;
- `agent_feed` (its delivery in `feed_delivery`), `lifecycle`, `run_patch`, `run_jobs`: the
  use cases;
- `changes`, `invoke`, `guards`, `views`: what they share; `service`: one facade.

The names below are the ones callers use; each is defined in its module.
"""

from turnkeeper.application.services.runs.agent_feed import AgentEventPage, PolledPage
from turnkeeper.application.services.runs.feed_delivery import Delivery
from turnkeeper.application.services.runs.run_patch import FollowupOp
from turnkeeper.application.services.runs.service import RunsService
from turnkeeper.application.services.runs.views import RunView, run_document

__all__ = [
    "AgentEventPage",
    "Delivery",
    "FollowupOp",
    "PolledPage",
    "RunView",
    "RunsService",
    "run_document",
]
