"""The migration lock refuses edited, removed and unlocked migrations."""

from __future__ import annotations

from pathlib import Path

from scripts.lock_migrations import file_digest, problems


def _setup(tmp_path: Path) -> tuple[Path, Path]:
    folder = tmp_path / "migrations"
    folder.mkdir()
    (folder / "0001_a.sql").write_text("CREATE TABLE a (id int);\n")
    (folder / "0002_b.sql").write_text("CREATE TABLE b (id int);\n")
    lock = tmp_path / "migrations.sha256"
    lock.write_text("".join(f"{file_digest(p)}  {p.name}\n" for p in sorted(folder.glob("*.sql"))))
    return folder, lock


def test_consistent_lock_has_no_problems(tmp_path: Path) -> None:
    folder, lock = _setup(tmp_path)
    assert problems(folder, lock) == ([], [])


def test_edited_migration_is_refused(tmp_path: Path) -> None:
    folder, lock = _setup(tmp_path)
    (folder / "0001_a.sql").write_text("CREATE TABLE a (id bigint);\n")
    errors, _ = problems(folder, lock)
    assert len(errors) == 1
    assert errors[0].startswith("0001_a.sql: edited after it was locked")


def test_removed_and_new_migrations(tmp_path: Path) -> None:
    folder, lock = _setup(tmp_path)
    (folder / "0002_b.sql").unlink()
    (folder / "0003_c.sql").write_text("CREATE TABLE c (id int);\n")
    errors, new = problems(folder, lock)
    assert errors == [
        "0002_b.sql: locked migration is missing; migrations are never removed once merged"
    ]
    assert [p.name for p in new] == ["0003_c.sql"]


def test_repository_lock_is_current() -> None:
    root = Path(__file__).resolve().parents[2]
    errors, new = problems(root / "sql" / "migrations", root / "sql" / "migrations.sha256")
    assert errors == []
    assert new == []
