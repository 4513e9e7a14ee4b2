"""The canonical target keys of threads, as the server derived them (seed 4.3 step 2)."""

from __future__ import annotations

from turnkeeper.adapters.client import wire
from turnkeeper.adapters.client.models import ThreadTarget
from turnkeeper.adapters.client.session import ApiSession


class TargetKeys:
    """Thread id -> target key, learnt from the server's answers and asked for when unknown.

    Args:
        session: the agent's HTTP session.
    """

    def __init__(self, session: ApiSession) -> None:
        self._session = session
        self._keys: dict[str, str] = {}

    async def read(self, thread_id: str) -> ThreadTarget:
        """GET the thread and remember its key (errors as `ApiSession.request` raises them).

        Args:
            thread_id: the thread.

        Returns:
            The thread as a send target.
        """
        target = wire.thread_target(await self._session.request("GET", f"/v1/threads/{thread_id}"))
        self._keys[thread_id] = target.target_key
        return target

    async def key(self, thread_id: str) -> str:
        """The remembered key of a thread, else `read` it.

        Args:
            thread_id: the thread.

        Returns:
            Its target key.
        """
        known = self._keys.get(thread_id)
        if known is not None:
            return known
        return (await self.read(thread_id)).target_key

    def remember(self, thread_id: str, target_key: str) -> None:
        """Keep the target key an answer named for a thread.

        Args:
            thread_id: the thread.
            target_key: its key.
        """
        self._keys[thread_id] = target_key

    def forget(self, thread_id: str) -> None:
        """Drop a key the server refused, so that the next send resolves it again.

        Args:
            thread_id: the thread.
        """
        self._keys.pop(thread_id, None)
