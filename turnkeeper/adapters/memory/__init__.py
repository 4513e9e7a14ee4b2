"""In-memory adapter: every port of `turnkeeper.application.ports`, behaving as PostgreSQL.

Units of work are serialized by one lock (the strongest isolation), so the rules that
PostgreSQL enforces with row locks hold here trivially; unique keys raise the same
application errors as the PostgreSQL adapter.
"""

from turnkeeper.adapters.memory.store import MemoryStore, MemoryUnitOfWorkFactory

__all__ = ["MemoryStore", "MemoryUnitOfWorkFactory"]
