"""The embedded PostgreSQL starts in a data directory whose path holds a space.

Found by an audit: pgserver hands the socket directory to postgres unquoted, postgres
split the path at the space and refused to start, so ``turnkeeper serve`` failed in any
folder whose path has a space (``StoreUnavailable: embedded PostgreSQL did not start``).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from tests.reliability.support_server import embedded_environment, run_cli
from turnkeeper.adapters.postgres.migrations import discover

#: The prefix of the data directory's parent: a space inside, short enough for a socket.
SPACED_PREFIX = "tk space-"


def test_migrate_starts_the_embedded_server_under_a_path_with_a_space() -> None:
    parent = Path(tempfile.mkdtemp(prefix=SPACED_PREFIX))
    try:
        env = embedded_environment(parent / "my data")
        done = run_cli(env, "migrate")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["applied"] == [m.version for m in discover()]
        # And again on the server's data from before: nothing left to apply.
        again = run_cli(env, "migrate")
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["applied"] == []
    finally:
        shutil.rmtree(parent, ignore_errors=True)
