"""``turnkeeper mcp`` as a command, and the session state it keeps per MCP session.

Without the ``mcp`` extra, or without its URL or token, the command exits 2 with one
line; the command line imports no part of the SDK until the command runs. A session
reuses the logical id of a pending send only for the same content, and the registry
keeps one session per key (its bound: tests/unit/test_mcp_sessions.py).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import httpx
import pytest

from turnkeeper.adapters.cli import EXIT_FAILURE, EXIT_USAGE, main
from turnkeeper.adapters.client import AgentRuntimeClient
from turnkeeper.adapters.client.session import ApiSession
from turnkeeper.adapters.mcp import command
from turnkeeper.adapters.mcp.command import ENV_AGENT_TOKEN, ENV_URL, MISSING_EXTRA
from turnkeeper.adapters.mcp.server import HTTP_PATH
from turnkeeper.adapters.mcp.session import DEFAULT_SESSION, McpSession, SessionRegistry

ROOT = Path(__file__).resolve().parents[2]
BASE_URL = "http://turnkeeper.example.com"
THREAD = "01900000-0000-7000-8000-00000000000d"


def test_without_the_extra_the_command_exits_2_naming_the_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(command, "mcp_available", lambda: False)
    monkeypatch.setenv(ENV_URL, BASE_URL)
    monkeypatch.setenv(ENV_AGENT_TOKEN, "tk_example")
    assert main(["mcp"]) == EXIT_USAGE
    assert capsys.readouterr().err.splitlines() == [MISSING_EXTRA]
    assert "pip install 'turnkeeper[mcp]'" in MISSING_EXTRA


def test_a_process_without_the_sdk_exits_2_with_one_line() -> None:
    # `sys.modules[name] = None` makes the SDK unimportable, as if it were not installed.
    code = (
        "import sys; sys.modules['mcp'] = None; "
        "from turnkeeper.adapters.cli import main; raise SystemExit(main(['mcp']))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), ENV_URL: BASE_URL, ENV_AGENT_TOKEN: "tk_example"},
        check=False,
    )
    assert done.returncode == EXIT_USAGE
    assert done.stderr.splitlines() == [MISSING_EXTRA]


@pytest.mark.parametrize(
    ("environment", "named"),
    [
        ({ENV_AGENT_TOKEN: "tk_example"}, ENV_URL),
        ({ENV_URL: "turnkeeper.example.com", ENV_AGENT_TOKEN: "tk_example"}, ENV_URL),
        ({ENV_URL: BASE_URL}, ENV_AGENT_TOKEN),
        ({ENV_URL: BASE_URL, ENV_AGENT_TOKEN: "  "}, ENV_AGENT_TOKEN),
    ],
)
def test_without_url_or_token_the_command_exits_2_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    environment: dict[str, str],
    named: str,
) -> None:
    monkeypatch.delenv(ENV_URL, raising=False)
    monkeypatch.delenv(ENV_AGENT_TOKEN, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert main(["mcp"]) == EXIT_USAGE
    (line,) = capsys.readouterr().err.splitlines()
    assert named in line
    assert "tk_example" not in line


def test_the_command_line_loads_no_part_of_the_sdk() -> None:
    code = "import sys, turnkeeper.adapters.cli; print('mcp' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert done.stdout.strip() == "False"


def _session(max_pending: int | None = None) -> McpSession:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise AssertionError("no request expected")

    transport = httpx.MockTransport(refuse)
    return McpSession(
        AgentRuntimeClient(BASE_URL, "tk_example", transport=transport),
        ApiSession(BASE_URL, "tk_example", transport=transport),
        max_pending=max_pending,
    )


def test_a_resend_of_the_same_content_reuses_the_pending_logical_id() -> None:
    session = _session()
    first = session.logical_id_for(THREAD, "Done, Alex.")
    session.keep_pending(THREAD, first, "Done, Alex.")
    assert session.logical_id_for(THREAD, "Done, Alex.") == first
    assert session.logical_id_for(THREAD, "Done, Sam.") != first
    session.forget_pending(THREAD, "Done, Alex.")
    assert session.logical_id_for(THREAD, "Done, Alex.") != first
    assert session.pending == {}


def test_a_send_of_other_words_keeps_the_pending_one() -> None:
    # The agent says something else to the thread before it resends the held content:
    # the resend still completes the first logical send (docs/mcp.md).
    session = _session()
    held = session.logical_id_for(THREAD, "The refund is done.")
    session.keep_pending(THREAD, held, "The refund is done.")
    between = session.logical_id_for(THREAD, "One moment, reading.")
    session.keep_pending(THREAD, between, "One moment, reading.")
    session.forget_pending(THREAD, "One moment, reading.")
    assert session.logical_id_for(THREAD, "The refund is done.") == held


def test_beyond_the_bound_the_oldest_pending_send_is_forgotten() -> None:
    session = _session(max_pending=2)
    ids = {}
    for words in ("one", "two", "three"):
        ids[words] = session.logical_id_for(THREAD, words)
        session.keep_pending(THREAD, ids[words], words)
    assert session.logical_id_for(THREAD, "one") != ids["one"]
    assert session.logical_id_for(THREAD, "two") == ids["two"]
    assert session.logical_id_for(THREAD, "three") == ids["three"]


def test_a_run_is_forgotten_once_it_ended() -> None:
    session = _session()
    session.take_run(THREAD, "run-1")
    assert session.runs == {THREAD: "run-1"}
    session.drop_run("run-1")
    assert session.runs == {}


def test_the_followups_handed_over_in_a_run_are_forgotten_with_it() -> None:
    session = _session()
    session.take_run(THREAD, "run-1")
    session.hand_over("run-1", "answer-1")
    session.hand_over("run-1", "answer-1")  # a redelivery is one follow-up
    session.hand_over("run-1", "answer-2")
    session.hand_over("run-2", "answer-3")
    assert session.handed_over("run-1") == ("answer-1", "answer-2")
    session.forget_handed("run-1", "answer-1")
    assert session.handed_over("run-1") == ("answer-2",)
    session.drop_run("run-1")
    assert session.handed == {"run-2": ["answer-3"]}


async def test_the_registry_keeps_one_session_per_key() -> None:
    made: list[McpSession] = []

    def factory() -> McpSession:
        made.append(_session())
        return made[-1]

    registry = SessionRegistry(factory, max_sessions=2)
    default = await registry.session(None)
    assert await registry.session(DEFAULT_SESSION) is default
    first = await registry.session("a")
    await registry.session("b")
    assert await registry.session("a") is first
    assert len(registry) == 3
    assert len(made) == 3
    await registry.aclose()
    assert len(registry) == 0


def _host_entries() -> list[dict[str, object]]:
    """The ``turnkeeper`` entries of the JSON snippets of docs/mcp.md, in page order."""
    page = (ROOT / "docs" / "mcp.md").read_text(encoding="utf-8")
    section = page.split("## Register it in an MCP host", 1)[1].split("\n## ", 1)[0]
    blocks = [part.split("```", 1)[0] for part in section.split("```json\n")[1:]]
    return [json.loads(block)["mcpServers"]["turnkeeper"] for block in blocks]


def test_the_host_snippets_of_the_docs_start_and_reach_this_command() -> None:
    stdio, http = _host_entries()
    # stdio: the console script, its sub-command and exactly the variables it reads.
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "scripts"
    ]
    assert scripts[stdio["command"]] == "turnkeeper.adapters.cli:main"
    assert stdio["args"] == ["mcp"]
    env = stdio["env"]
    assert isinstance(env, dict)
    assert set(env) == {ENV_URL, ENV_AGENT_TOKEN}
    assert str(env[ENV_URL]).startswith("https://")
    # HTTP: where `turnkeeper mcp --http` listens by default.
    assert http == {
        "type": "http",
        "url": f"http://{command.DEFAULT_HOST}:{command.DEFAULT_PORT}{HTTP_PATH}",
    }


def test_a_taken_metrics_port_is_the_documented_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # docs/mcp.md: "turnkeeper: cannot listen on 127.0.0.1:8765: Address already in use",
    # for --http and --metrics-port alike.
    monkeypatch.setenv(ENV_URL, BASE_URL)
    monkeypatch.setenv(ENV_AGENT_TOKEN, "tk_example")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        code = main(["mcp", "--metrics-port", str(port)])
    (line,) = capsys.readouterr().err.splitlines()
    assert code == EXIT_FAILURE
    assert line == f"turnkeeper: cannot listen on 127.0.0.1:{port}: Address already in use"
    page = (ROOT / "docs" / "mcp.md").read_text(encoding="utf-8")
    assert "`turnkeeper: cannot listen on 127.0.0.1:8765: Address already in use`" in page


@pytest.mark.parametrize(
    ("environment", "line"),
    [
        (
            {
                "TURNKEEPER_MCP__CHUNK_BYTES": "5000",
                "TURNKEEPER_MESSAGE__MAX_CONTENT_BYTES": "4096",
            },
            "turnkeeper: invalid configuration: mcp.chunk_bytes must not exceed "
            "message.max_content_bytes (4096), got 5000",
        ),
        (
            {"TURNKEEPER_MCP__WAIT_SECONDS": "301"},
            "turnkeeper: invalid configuration: mcp.wait_seconds must not exceed "
            "mcp.max_wait_seconds (300), got 301",
        ),
    ],
)
def test_limits_that_contradict_each_other_exit_2_before_anything_is_served(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    environment: dict[str, str],
    line: str,
) -> None:
    monkeypatch.setenv(ENV_URL, BASE_URL)
    monkeypatch.setenv(ENV_AGENT_TOKEN, "tk_example")
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert main(["mcp"]) == EXIT_USAGE
    assert capsys.readouterr().err.splitlines() == [line]
