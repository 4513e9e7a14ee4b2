"""In-memory adapter: every port of `application.ports`, with the behaviour of PostgreSQL.

Units of work are serialized by one lock (the strongest isolation), so the rules that
PostgreSQL enforces with row locks hold here trivially; unique keys raise the same
application errors as the PostgreSQL adapter.
"""

from adapters.memory.store import MemoryStore, MemoryUnitOfWorkFactory

__all__ = ["MemoryStore", "MemoryUnitOfWorkFactory"]
