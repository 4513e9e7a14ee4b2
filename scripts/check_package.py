"""Packaging check: build the sdist and the wheel, then use the wheel as a new user would.

Run by ``make test`` (target ``package``). Every step happens in a temporary directory
outside the checkout, so nothing of the source tree can leak into the installed package:

1. build the sdist and the wheel (``python -m build``);
2. the wheel's only top-level import name is ``turnkeeper``, with ``py.typed``, every
   ``.sql`` file of ``sql/`` inside it as ``turnkeeper/sql``, the console's pinned
   files (``GET /console``) and the assets of ``/docs`` (``turnkeeper/adapters/http/static``);
   pgserver is required only on the Pythons it has wheels for;
3. a fresh virtualenv with ``turnkeeper[embedded]`` and mypy: ``turnkeeper migrate`` on an
   embedded PostgreSQL exits 0, ``turnkeeper serve`` answers 200 on /readyz, the embedding
   example runs on memory and PostgreSQL, and ``mypy --strict`` on a small user module
   reports no error;
4. a fresh virtualenv with the bare wheel: it imports and runs the memory example, and
   ``turnkeeper serve`` without a database exits 2 with one line naming both ways to get
   one.

Exit status 0 when every step holds; otherwise 1 with the failing step.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "docs" / "examples" / "embedding.py"
#: One of the console's pinned files: non-Python files under turnkeeper/ must ship.
CONSOLE_SCRIPT = "turnkeeper/adapters/http/console/console.js"
#: The marker of every pgserver requirement: its wheels stop at CPython 3.12, and the
#: package declares 3.13 (there the extras must install without it).
PGSERVER_MARKER = "python_version < '3.13'"

#: Seconds `turnkeeper serve` may take to answer 200 on /readyz (it migrates first).
SERVE_READY_SECONDS = 60.0
#: Seconds between two /readyz probes.
PROBE_INTERVAL_SECONDS = 0.2
#: Seconds any one install or command may take.
STEP_TIMEOUT_SECONDS = 600

#: What a user's module does with the public API; mypy --strict must accept it.
USER_MODULE = '''"""A user's module."""
import turnkeeper
from turnkeeper import MessageDraft, Settings

backend: turnkeeper.Backend = turnkeeper.memory_backend(Settings())
draft = MessageDraft(client_msg_id="alex-1", content="Alex here")
'''


class CheckFailed(Exception):
    """One step of the check did not hold."""


def _run(args: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        args,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT_SECONDS,
        check=False,
    )
    if done.returncode != 0:
        raise CheckFailed(
            f"{' '.join(args)} exited {done.returncode}\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        )
    return done.stdout


def build(out: Path) -> tuple[Path, Path]:
    """Build the sdist and the wheel into `out`; returns (sdist, wheel)."""
    _run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], cwd=out)
    sdists = sorted(out.glob("*.tar.gz"))
    wheels = sorted(out.glob("*.whl"))
    if len(sdists) != 1 or len(wheels) != 1:
        raise CheckFailed(f"expected one sdist and one wheel in {out}")
    return sdists[0], wheels[0]


def check_wheel_contents(wheel: Path) -> None:
    """The wheel holds only `turnkeeper`, with py.typed, the SQL, the console and /docs assets."""
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    if tops != {"turnkeeper"}:
        raise CheckFailed(f"the wheel's top-level names are {sorted(tops)}, not ['turnkeeper']")
    if "turnkeeper/py.typed" not in names:
        raise CheckFailed("the wheel has no turnkeeper/py.typed")
    wanted = {
        "turnkeeper/sql/" + p.relative_to(ROOT / "sql").as_posix()
        for p in (ROOT / "sql").rglob("*.sql")
    }
    missing = sorted(wanted - set(names))
    if missing:
        raise CheckFailed(f"the wheel lacks SQL files: {missing}")
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    pgserver = [
        line
        for line in zipfile.ZipFile(wheel).read(metadata).decode().splitlines()
        if line.startswith("Requires-Dist: pgserver")
    ]
    if not pgserver or any(PGSERVER_MARKER not in line for line in pgserver):
        raise CheckFailed(f"pgserver is required beyond the Pythons it has wheels for: {pgserver}")
    if CONSOLE_SCRIPT not in names:
        raise CheckFailed(f"the wheel lacks the console's pinned files ({CONSOLE_SCRIPT})")
    assets = ROOT / "turnkeeper" / "adapters" / "http" / "static"
    wanted_assets = {
        "turnkeeper/" + p.relative_to(ROOT / "turnkeeper").as_posix()
        for p in assets.rglob("*")
        if p.is_file()
    }
    missing = sorted(wanted_assets - set(names))
    if not wanted_assets or missing:
        raise CheckFailed(f"the wheel lacks the assets of /docs: {missing}")


def _venv(path: Path, requirements: list[str], cwd: Path) -> Path:
    _run([sys.executable, "-m", "venv", str(path)], cwd=cwd)
    python = path / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "--quiet", *requirements], cwd=cwd)
    return path / "bin"


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEPER_")}
    env.pop("PYTHONPATH", None)
    env.update({"TURNKEEPER_DATA_DIR": str(home), **extra})
    return env


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _serve_until_ready(bin_dir: Path, home: Path) -> None:
    port = _free_port()
    server = subprocess.Popen(  # the real console script, as a user starts it
        [str(bin_dir / "turnkeeper"), "serve", "--port", str(port), "--no-jobs"],
        cwd=home,
        env=_env(home),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + SERVE_READY_SECONDS
        while time.monotonic() < deadline:
            if server.poll() is not None:
                raise CheckFailed(f"turnkeeper serve exited {server.returncode}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz") as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError):
                pass
            time.sleep(PROBE_INTERVAL_SECONDS)
        raise CheckFailed("turnkeeper serve did not answer 200 on /readyz in time")
    finally:
        server.terminate()
        server.wait(timeout=STEP_TIMEOUT_SECONDS)


def check_with_embedded(wheel: Path, work: Path) -> None:
    """Step 3: the wheel with the embedded extra, used from outside the checkout."""
    home = work / "embedded-home"
    home.mkdir()
    bin_dir = _venv(work / "venv-embedded", [f"{wheel}[embedded]", "mypy"], work)
    _run([str(bin_dir / "turnkeeper"), "migrate"], cwd=home, env=_env(home))
    _serve_until_ready(bin_dir, home)
    example = home / "embedding.py"
    shutil.copy(EXAMPLE, example)
    _run([str(bin_dir / "python"), str(example)], cwd=home, env=_env(home))
    user = home / "user_module.py"
    user.write_text(USER_MODULE, encoding="utf-8")
    _run(
        [str(bin_dir / "mypy"), "--strict", "--no-incremental", str(user)],
        cwd=home,
        env=_env(home),
    )


def check_bare(wheel: Path, work: Path) -> None:
    """Step 4: the wheel without extras imports, runs the memory example, refuses serve."""
    home = work / "bare-home"
    home.mkdir()
    bin_dir = _venv(work / "venv-bare", [str(wheel)], work)
    example = home / "embedding.py"
    shutil.copy(EXAMPLE, example)
    _run([str(bin_dir / "python"), str(example), "memory"], cwd=home, env=_env(home))
    done = subprocess.run(
        [str(bin_dir / "turnkeeper"), "serve"],
        cwd=home,
        env=_env(home),
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT_SECONDS,
        check=False,
    )
    lines = done.stderr.strip().splitlines()
    if done.returncode != 2 or len(lines) != 1:
        raise CheckFailed(f"bare serve: exit {done.returncode}, stderr {done.stderr!r}")
    if "TURNKEEPER_DATABASE_URL" not in lines[0] or "turnkeeper[embedded]" not in lines[0]:
        raise CheckFailed(f"bare serve does not name both ways to a database: {lines[0]!r}")


def main(argv: list[str] | None = None) -> int:
    """Run every step; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="turnkeeper-package-") as folder:
        work = Path(folder)
        try:
            sdist, wheel = build(work)
            check_wheel_contents(wheel)
            print(f"package: built {sdist.name} and {wheel.name}; wheel contents ok", flush=True)
            check_bare(wheel, work)
            print("package: bare wheel imports, runs the memory example, refuses serve", flush=True)
            check_with_embedded(wheel, work)
            print("package: [embedded] migrate, serve /readyz, example, mypy --strict ok")
        except CheckFailed as exc:
            print(f"package check failed: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
