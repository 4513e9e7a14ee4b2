"""Keep sql/migrations.sha256: the checksum of every merged migration, never rewritten.

``--check`` (run by ``make test``) fails when a locked migration was edited, when a
locked one is missing, or when a new migration is not locked yet. Without ``--check`` the
script appends the entries of new migrations; it never changes an existing entry, so an
edited migration stays a failure until the edit is undone and a new migration written.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIGRATIONS = ROOT / "sql" / "migrations"
LOCK = ROOT / "sql" / "migrations.sha256"


def file_digest(path: Path) -> str:
    """SHA-256 hex digest of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_lock(lock: Path) -> dict[str, str]:
    """The locked entries: file name -> digest, in file order."""
    entries: dict[str, str] = {}
    if not lock.exists():
        return entries
    for line in lock.read_text(encoding="utf-8").splitlines():
        if line.strip():
            digest, name = line.split(maxsplit=1)
            entries[name.strip()] = digest
    return entries


def problems(migrations: Path, lock: Path) -> tuple[list[str], list[Path]]:
    """What is wrong, and which files are new.

    Args:
        migrations: the migrations folder.
        lock: the lock file.

    Returns:
        The error lines and the new (unlocked) files.
    """
    locked = read_lock(lock)
    files = {path.name: path for path in sorted(migrations.glob("*.sql"))}
    errors = [
        f"{name}: locked migration is missing; migrations are never removed once merged"
        for name in locked
        if name not in files
    ]
    errors += [
        f"{name}: edited after it was locked; migrations are never edited once merged, "
        "write a new migration instead"
        for name, path in files.items()
        if name in locked and file_digest(path) != locked[name]
    ]
    new = [path for name, path in files.items() if name not in locked]
    return errors, new


def main(argv: list[str] | None = None) -> int:
    """Check or extend the lock file.

    Returns:
        0 when consistent (or extended), 1 otherwise.
    """
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="only check, change nothing")
    args = parser.parse_args(argv)
    errors, new = problems(MIGRATIONS, LOCK)
    if args.check:
        errors += [f"{path.name}: not locked yet; run make migrations-lock" for path in new]
    for line in errors:
        print(f"sql/migrations.sha256: {line}", file=sys.stderr)
    if errors:
        return 1
    if new and not args.check:
        with LOCK.open("a", encoding="utf-8") as out:
            for path in new:
                out.write(f"{file_digest(path)}  {path.name}\n")
                print(f"locked {path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
