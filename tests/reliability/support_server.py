"""`turnkeeper serve` subprocesses on a test database, and the concurrent load they get.

The crash and scale-out tests run the real command line: a server process per port on
the per-test PostgreSQL database (``TURNKEEPER_DATABASE_URL``), with a fixed owner token
and signing key so that a restarted or second process accepts the same tokens. Readiness
is polled on ``/readyz`` with a deadline; nothing sleeps for a fixed time.

`Load` is the traffic of both tests: people post messages with client ids (retrying
every request that got no answer with the same client id, until it gets one) and the
operator agent works through its runs (start, acknowledge follow-ups, answer with the
run's id through the freshness gate, finish). Every answer is recorded, so that the test
can prove afterwards that each acknowledged message is stored exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import attrs
import httpx
from psycopg.conninfo import conninfo_to_dict

from tests.support.database import fetch

#: The console script of this environment.
TURNKEEPER = Path(sys.executable).with_name("turnkeeper")
#: The owner's token of every test server (Robin of the demo world).
OWNER_TOKEN = "tk-owner-reliability-example.com-0123456789"
#: The invocation token key shared by every process of one test.
SIGNING_KEY = "reliability-signing-key-example.com-0123456789abcdef"
#: Seconds a server may take to answer /readyz 200 after it was started.
READY_TIMEOUT_SECONDS = 60.0
#: Seconds a command (demo-world, jobs --once, check) may take.
CLI_TIMEOUT_SECONDS = 60.0
#: Seconds a stopped server may take to exit after SIGTERM (then SIGKILL). A bound on a
#: hang, not a measure of speed: on a loaded CI machine a benchmark's stop (the embedded
#: server's shutdown checkpoint, then removing its data directory) took more than 10.
STOP_TIMEOUT_SECONDS = 60.0
#: Seconds one HTTP request may take before the client gives up on its answer.
REQUEST_TIMEOUT_SECONDS = 10.0
#: Seconds between two polls of /readyz.
READY_POLL_SECONDS = 0.05
#: Burst of the rate limit in the test servers: the load must never be rate limited.
LOAD_RATE_BURST = 100000
#: Seconds an agent without new events waits before it polls again.
AGENT_IDLE_SECONDS = 0.02
#: The answers that mean "this request reached its end" (no retry).
FINAL_STATUSES = frozenset({200, 201})


def database_url(conninfo: str) -> str:
    """The per-test conninfo (``key=value`` or URL) as a ``postgresql://`` URL.

    Args:
        conninfo: the test database's libpq connection string.

    Returns:
        The same database as a URL (a socket directory goes into ``?host=``).
    """
    parts = conninfo_to_dict(conninfo)
    user = quote(str(parts.get("user", "")), safe="")
    password = parts.get("password")
    auth = f"{user}:{quote(str(password), safe='')}@" if password else f"{user}@"
    host = str(parts.get("host", ""))
    port = parts.get("port")
    dbname = quote(str(parts["dbname"]), safe="")
    if host.startswith("/"):
        query = f"?host={quote(host, safe='')}" + (f"&port={port}" if port else "")
        return f"postgresql://{auth}/{dbname}{query}"
    netloc = host + (f":{port}" if port else "")
    return f"postgresql://{auth}{netloc}/{dbname}"


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_env(conninfo: str, data_dir: Path, **settings: str) -> dict[str, str]:
    """The environment of a turnkeeper process on the test database.

    Args:
        conninfo: the test database.
        data_dir: the process's data directory (nothing is written to the cwd).
        settings: extra ``TURNKEEPER_*`` variables, by name without the prefix.

    Returns:
        The environment.
    """
    env = {key: value for key, value in os.environ.items() if not key.startswith("TURNKEEPER_")}
    env.update(
        {
            "TURNKEEPER_DATABASE_URL": database_url(conninfo),
            "TURNKEEPER_OWNER_TOKEN": OWNER_TOKEN,
            "TURNKEEPER_SIGNING_KEY": SIGNING_KEY,
            "TURNKEEPER_DATA_DIR": str(data_dir),
            "TURNKEEPER_RATELIMIT__RL__MESSAGE__BURST": str(LOAD_RATE_BURST),
            # The workers' shared metrics of a server killed outright stay with the test.
            "TMPDIR": str(data_dir),
        }
    )
    env.update({f"TURNKEEPER_{name}": value for name, value in settings.items()})
    return env


def embedded_environment(data_dir: Path, **extra: str) -> dict[str, str]:
    """A server environment without a database URL: the embedded server in `data_dir`.

    Args:
        data_dir: the process's data directory (``TURNKEEPER_DATA_DIR``).
        extra: more variables, by their full names.

    Returns:
        The environment, without any other ``TURNKEEPER_*`` variable of this process.
    """
    env = {key: value for key, value in os.environ.items() if not key.startswith("TURNKEEPER_")}
    env.update({"TURNKEEPER_DATA_DIR": str(data_dir), "TURNKEEPER_SIGNING_KEY": SIGNING_KEY})
    env.update(extra)
    return env


def run_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """Run one ``turnkeeper`` command to its end (bounded by `CLI_TIMEOUT_SECONDS`)."""
    return subprocess.run(
        [str(TURNKEEPER), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_SECONDS,
        check=False,
    )


def start_cli(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    """Start one ``turnkeeper`` command without waiting for it."""
    return subprocess.Popen(
        [str(TURNKEEPER), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def demo_world(env: dict[str, str]) -> dict[str, Any]:
    """Build the demo world with ``turnkeeper demo-world`` and return its document."""
    done = run_cli(env, "demo-world")
    assert done.returncode == 0, done.stderr
    world: dict[str, Any] = json.loads(done.stdout)
    return world


@attrs.define
class Server:
    """One ``turnkeeper serve`` process on a fixed port; restartable on the same port."""

    env: dict[str, str]
    log_dir: Path
    port: int = attrs.field(factory=free_port)
    jobs: bool = False
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def url(self) -> str:
        """The base URL (loopback only)."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start the process (output into a log file of this start)."""
        assert self.process is None or self.process.poll() is not None
        self.starts += 1
        log = self.log_dir / f"serve-{self.port}-{self.starts}.log"
        args = ["serve", "--host", "127.0.0.1", "--port", str(self.port)]
        if not self.jobs:
            args.append("--no-jobs")
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [str(TURNKEEPER), *args],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    async def wait_ready(self) -> None:
        """Poll /readyz until it answers 200, within `READY_TIMEOUT_SECONDS`.

        Raises:
            AssertionError: when the process exits or the deadline passes.
        """
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        async with httpx.AsyncClient(timeout=READY_POLL_SECONDS * 20) as client:
            while time.monotonic() < deadline:
                assert self.process is not None
                assert self.process.poll() is None, self.log()
                with contextlib.suppress(httpx.TransportError):
                    answer = await client.get(f"{self.url}/readyz")
                    if answer.status_code == 200:
                        return
                await asyncio.sleep(READY_POLL_SECONDS)
        raise AssertionError(
            f"server on port {self.port} not ready in {READY_TIMEOUT_SECONDS}s\n{self.log()}"
        )

    def kill(self) -> None:
        """SIGKILL the process and reap it (a crash: nothing is flushed or closed)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=STOP_TIMEOUT_SECONDS)

    def stop(self) -> None:
        """Stop the process politely (SIGTERM), SIGKILL when it does not exit in time."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            self.kill()

    def log(self) -> str:
        """The output of the latest start (for failure messages)."""
        path = self.log_dir / f"serve-{self.port}-{self.starts}.log"
        return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""


@contextlib.contextmanager
def servers(
    env: dict[str, str], log_dir: Path, count: int, *, jobs: bool = False
) -> Iterator[list[Server]]:
    """Started server processes (not yet ready), stopped when the block ends."""
    started = [Server(env=env, log_dir=log_dir, jobs=jobs) for _ in range(count)]
    try:
        for server in started:
            server.start()
        yield started
    finally:
        for server in started:
            server.stop()


# -- the load ---------------------------------------------------------------------------


@attrs.define
class Post:
    """One logical message of a poster and what became of it."""

    author: str
    thread_id: str
    client_id: str
    content: str
    mentions: list[str] = attrs.Factory(list)
    #: Every answer status, in order (a missing answer is recorded as 0).
    statuses: list[int] = attrs.Factory(list)
    replay_headers: list[str | None] = attrs.Factory(list)
    message_id: str | None = None

    @property
    def acknowledged(self) -> bool:
        """The request got a 2xx answer at least once."""
        return any(s in FINAL_STATUSES for s in self.statuses)

    def body(self) -> dict[str, object]:
        """The createMessage body (identical on every retry)."""
        body: dict[str, object] = {"client_msg_id": self.client_id, "content": self.content}
        if self.mentions:
            body["mentions"] = self.mentions
        return body


@attrs.define
class LoadStats:
    """What happened during a load."""

    no_answer: int = 0
    replays: int = 0
    server_errors: list[str] = attrs.Factory(list)
    runs_started: set[str] = attrs.Factory(set)
    runs_finished: set[str] = attrs.Factory(set)
    answers_sent: int = 0
    followups_patched: int = 0


class ServerDown(Exception):
    """No answer from any server within the time the load allows."""


@attrs.define
class Load:
    """Concurrent posters and one operator agent against one or more servers.

    Attributes:
        world: the demo world document (ids and tokens).
        urls: returns the base URL for the n-th request of a client (one server, or
            round robin over several).
        up: set while the servers answer; a client without an answer waits for it.
        deadline: monotonic time after which nothing is retried any more.
        max_attempts: attempts per request at most.
    """

    world: dict[str, Any]
    urls: Callable[[int], str]
    up: asyncio.Event
    deadline: float
    max_attempts: int
    stats: LoadStats = attrs.Factory(LoadStats)
    _counter: int = 0

    def token(self, handle: str) -> str:
        """The bearer token of a person or agent of the world."""
        found = self.world["people"].get(handle) or self.world["agents"][handle]
        return str(found["token"])

    def principal_id(self, handle: str) -> str:
        """The id of a person or agent of the world."""
        found = self.world["people"].get(handle) or self.world["agents"][handle]
        return str(found["id"])

    def main_thread(self, channel: str) -> str:
        """The main thread of a text channel."""
        return str(self.world["channels"][channel]["main_thread_id"])

    async def request(
        self,
        client: httpx.AsyncClient,
        method: str,
        path: str,
        who: str,
        body: object | None = None,
    ) -> httpx.Response | None:
        """One attempt: the answer, or None when none came (server down or killed).

        A 5xx answer is recorded as a server error (the tests require none).
        """
        self._counter += 1
        url = self.urls(self._counter) + path
        try:
            answer = await client.request(
                method,
                url,
                json=body,
                headers={"Authorization": f"Bearer {self.token(who)}"},
            )
        except httpx.TransportError:
            self.stats.no_answer += 1
            return None
        if answer.status_code >= 500:
            self.stats.server_errors.append(f"{method} {path}: {answer.status_code} {answer.text}")
        return answer

    async def until_answered(
        self,
        client: httpx.AsyncClient,
        method: str,
        path: str,
        who: str,
        body: object | None = None,
    ) -> httpx.Response:
        """Repeat one request (same body, so same client id) until it gets an answer.

        Raises:
            ServerDown: after `max_attempts` or past the deadline.
        """
        for _ in range(self.max_attempts):
            answer = await self.request(client, method, path, who, body)
            if answer is not None:
                return answer
            await self.wait_up()
        raise ServerDown(f"{method} {path}: no answer in {self.max_attempts} attempts")

    async def wait_up(self) -> None:
        """Wait until the servers answer again (bounded by the deadline)."""
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise ServerDown("the load's deadline passed")
        try:
            await asyncio.wait_for(self.up.wait(), timeout=remaining)
        except TimeoutError as exc:
            raise ServerDown("the servers did not come back") from exc

    async def post_until(
        self,
        client: httpx.AsyncClient,
        make: Callable[[int], Post],
        posts: list[Post],
        stop: asyncio.Event,
        max_posts: int,
    ) -> None:
        """Post new messages (at most `max_posts`) until `stop` is set.

        Every message is retried with its client id until it got a 2xx answer.
        """
        for index in range(max_posts):
            if stop.is_set():
                return
            post = make(index)
            posts.append(post)
            await self.send_post(client, post)

    async def send_post(self, client: httpx.AsyncClient, post: Post) -> None:
        """Send one post until it got a final answer (2xx), retrying with its client id.

        Raises:
            ServerDown: when no answer came within the attempts and the deadline.
        """
        for _ in range(self.max_attempts):
            answer = await self.request(
                client, "POST", f"/v1/threads/{post.thread_id}/messages", post.author, post.body()
            )
            if answer is None:
                post.statuses.append(0)
                post.replay_headers.append(None)
                await self.wait_up()
                continue
            post.statuses.append(answer.status_code)
            post.replay_headers.append(answer.headers.get("Idempotent-Replay"))
            assert answer.status_code in FINAL_STATUSES, answer.text
            if answer.status_code == 200:
                self.stats.replays += 1
            message_id = str(answer.json()["id"])
            assert post.message_id in (None, message_id), (post, message_id)
            post.message_id = message_id
            return
        raise ServerDown(f"post {post.client_id}: no answer")

    async def agent(
        self, client: httpx.AsyncClient, handle: str, stop: asyncio.Event, max_rounds: int
    ) -> None:
        """The operator agent: works through its runs until `stop` is set (bounded)."""
        await self.until_answered(
            client, "PUT", "/v1/agent/heartbeat", handle, {"capabilities": {"followups": "steer"}}
        )
        for _ in range(max_rounds):
            if stop.is_set():
                return
            try:
                await self._agent_round(client, handle)
            except ServerDown:
                if stop.is_set():
                    return
                raise

    async def _agent_round(self, client: httpx.AsyncClient, handle: str) -> None:
        page = await self.until_answered(client, "GET", "/v1/agent/events", handle)
        assert page.status_code == 200, page.text
        document = page.json()
        for event in document["events"]:
            if event["type"] != "agent.invocation":
                continue
            await self._work_run(client, handle, event)
        if document["events"]:
            await self.until_answered(
                client,
                "POST",
                "/v1/agent/events/ack",
                handle,
                {"through_seq": document["next_after"]},
            )
        else:
            # Nothing to do yet: a short pause instead of a busy loop of polls.
            await asyncio.sleep(AGENT_IDLE_SECONDS)

    async def _work_run(
        self, client: httpx.AsyncClient, handle: str, event: dict[str, Any]
    ) -> None:
        run_id = str(event["payload"]["run_id"])
        thread_id = str(event["payload"]["thread_id"])
        started = await self.until_answered(
            client,
            "POST",
            f"/v1/runs/{run_id}/start",
            handle,
            {"invocation_token": event["invocation_token"]},
        )
        if started.status_code != 200:
            return  # ended meanwhile, or started by an earlier attempt: nothing to redo
        self.stats.runs_started.add(run_id)
        run = started.json()
        open_followups = [
            m for m, f in run["followups"].items() if f["state"] in ("queued", "delivered")
        ]
        if open_followups:
            patched = await self.until_answered(
                client,
                "PATCH",
                f"/v1/runs/{run_id}",
                handle,
                {
                    "base_version": run["version"],
                    "ops": [
                        {"op": "replace", "path": f"/followups/{m}/state", "value": "absorbed"}
                        for m in open_followups
                    ],
                },
            )
            if patched.status_code == 200:
                self.stats.followups_patched += len(open_followups)
        thread = await self.until_answered(client, "GET", f"/v1/threads/{thread_id}", handle)
        assert thread.status_code == 200, thread.text
        sent = await self.until_answered(
            client,
            "POST",
            "/v1/agent/send",
            handle,
            {
                "target": thread_id,
                "content": f"answer of run {run_id}",
                "client_message_id": f"answer-{run_id}",
                "run_id": run_id,
                "freshness": {
                    "target_key": thread.json()["target_key"],
                    "seen_up_to_seq": thread.json()["latest_seq"],
                },
            },
        )
        if sent.status_code == 200 and sent.json()["state"] in ("sent", "already_sent"):
            self.stats.answers_sent += 1
        finished = await self.until_answered(
            client, "POST", f"/v1/runs/{run_id}/finish", handle, {"state": "completed"}
        )
        if finished.status_code == 200:
            self.stats.runs_finished.add(run_id)


def post_maker(
    load: Load, author: str, channel: str, *, prefix: str, mention: str | None = None
) -> Callable[[int], Post]:
    """Makes the n-th post of one author into a main thread (unique client ids)."""
    thread_id = load.main_thread(channel)
    mentions = [load.principal_id(mention)] if mention else []
    run = uuid.uuid4().hex[:8]

    def make(index: int) -> Post:
        return Post(
            author=author,
            thread_id=thread_id,
            client_id=f"{prefix}-{author}-{channel}-{index}-{run}",
            content=f"{author} writes message {index} ({prefix})",
            mentions=mentions,
        )

    return make


# -- what the tests prove afterwards ----------------------------------------------------


def check_answers(posts: list[Post]) -> None:
    """Every post got a 2xx; a 200 is always a replay; at most one 201 per client id."""
    for post in posts:
        assert post.acknowledged, post
        finals = [s for s in post.statuses if s != 0]
        assert finals, post
        assert all(s in FINAL_STATUSES for s in finals), post
        assert finals.count(201) <= 1, post
        for status, header in zip(post.statuses, post.replay_headers, strict=True):
            if status == 200:
                assert header == "true", post
            if status == 201:
                assert header is None, post


async def check_stored_exactly_once(conninfo: str, load: Load, posts: list[Post]) -> None:
    """Each acknowledged post is stored once, with the id its answer named, and nothing else.

    The authors of the posts write nothing else, so their text messages are exactly the
    posts: no lost message, no duplicate.
    """
    found = await fetch(
        conninfo,
        "SELECT author_id::text, client_msg_id, id::text FROM messages "
        "WHERE author_id = ANY(%(authors)s::uuid[]) AND kind = 'text'",
        {"authors": sorted({load.principal_id(p.author) for p in posts})},
    )
    stored: dict[tuple[str, str], list[str]] = {}
    for author_id, client_id, message_id in found:
        stored.setdefault((author_id, client_id), []).append(message_id)
    expected = {(load.principal_id(p.author), p.client_id): [p.message_id] for p in posts}
    assert stored == expected


async def resend_all(load: Load, client: httpx.AsyncClient, posts: list[Post]) -> None:
    """Send every acknowledged post again: each answer is 200, a replay of the same id."""
    for post in posts:
        answer = await load.until_answered(
            client, "POST", f"/v1/threads/{post.thread_id}/messages", post.author, post.body()
        )
        assert answer.status_code == 200, answer.text
        assert answer.headers.get("Idempotent-Replay") == "true"
        assert answer.json()["id"] == post.message_id
