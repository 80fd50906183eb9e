"""Fresh files written by the real clients, each with the last request the client sent for it.

Every helper runs its client once against the capture server with a scripted conversation and returns a
:class:`FreshFile`: the file the client wrote, the client's own last main-conversation request, and the
file's leaf that request was built from (the parent of the reply's first line), so a test can rebuild the
same request from the file and compare. The compat conftest generates each once per test session.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.compat.capture_server import (
    SUBAGENT_MARKER,
    JsonObject,
    RecordedRequest,
    Script,
    Text,
    Thinking,
    ToolUse,
    reply,
)
from tests.compat.clients import ClaudeCodeHome, ClientFailed, ClientRun, PiHome, last_main_request

HomeFactory = Callable[[str], ClaudeCodeHome]
"""Makes a fresh :class:`ClaudeCodeHome` by name (the conftest binds the binary, the server and tmp)."""


@dataclass(frozen=True)
class FreshFile:
    name: str
    path: Path
    request: JsonObject
    """The body of the client's last main-conversation request for this file."""
    leaf: str
    """The uuid (pi: entry id) of the file's line that request ended at."""
    run: ClientRun


def _lines(path: Path) -> list[JsonObject]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def request_leaf(path: Path, request: RecordedRequest) -> str:
    """The uuid of the line the client's request was built up to: the parent of the reply's first line."""
    for line in _lines(path):
        message = line.get("message")
        if isinstance(message, dict) and message.get("id") == request.reply_id:
            return str(line["parentUuid"])
    raise ClientFailed(f"{path.name} holds no reply {request.reply_id}")


def pi_request_leaf(path: Path, request: RecordedRequest) -> str:
    """pi: the id of the entry before the reply (pi stores the assistant message as one entry)."""
    entries = _lines(path)
    for entry in entries:
        message = entry.get("message")
        if isinstance(message, dict) and message.get("responseId") == request.reply_id:
            return str(entry["parentId"])
    # pi versions without responseId: the reply is the last assistant entry whose parent exists.
    replies = [e for e in entries if isinstance(e.get("message"), dict) and e["message"].get("role") == "assistant"]
    if not replies:
        raise ClientFailed(f"{path.name} holds no assistant entry")
    return str(replies[-1]["parentId"])


def _claude_fresh(name: str, home: ClaudeCodeHome, run: ClientRun) -> FreshFile:
    last = last_main_request(run)
    path = home.transcript(run.session_id())
    assert last.body is not None
    return FreshFile(name, path, last.body, request_leaf(path, last), run)


def bash(tool_id: str, command: str) -> ToolUse:
    return ToolUse(tool_id, "Bash", {"command": command, "description": f"run {command}"})


def claude_parallel_tools(home: ClaudeCodeHome) -> FreshFile:
    """Thinking with a signature, text, two parallel Bash calls of which one fails, then the answer."""
    script = Script(
        main=[
            reply(
                Thinking("Two commands, run them together.", "sig-parallel-1"),
                Text("Running both."),
                bash("toolu_par_ok", "echo compat-ok"),
                bash("toolu_par_fail", "exit 3"),
            ),
            reply(Thinking("One failed with exit 3.", "sig-parallel-2"), Text("One succeeded, one failed.")),
        ]
    )
    return _claude_fresh("parallel-tools", home, home.run("run two commands at once", script))


def claude_resumed(home: ClaudeCodeHome, session_id: str) -> FreshFile:
    """``--resume <id>`` with a new prompt: the whole history plus a new turn with a tool."""
    script = Script(
        main=[reply(Text("Checking again."), bash("toolu_resume_1", "echo resumed")), reply(Text("Resumed fine."))]
    )
    return _claude_fresh("resume", home, home.run("and once more", script, "--resume", session_id))


def claude_continued(home: ClaudeCodeHome) -> FreshFile:
    """``--continue``: the most recent session in the project directory, one more turn."""
    script = Script(main=[reply(Text("Continuing."))])
    return _claude_fresh("continue", home, home.run("continue please", script, "--continue"))


def claude_forked(home: ClaudeCodeHome, session_id: str) -> FreshFile:
    """``--resume <id> --fork-session``: a new session id holding a copy of the history, one more turn."""
    script = Script(main=[reply(Thinking("A fork.", "sig-fork-1"), Text("Forked."))])
    run = home.run("in a fork now", script, "--resume", session_id, "--fork-session")
    if run.session_id() == session_id:
        raise ClientFailed("--fork-session kept the session id")
    return _claude_fresh("fork", home, run)


def claude_permission_denied(home: ClaudeCodeHome) -> FreshFile:
    """Default permission mode in print mode: a Bash call the user never allowed is denied."""
    script = Script(
        main=[
            reply(Text("I will write a file."), bash("toolu_denied_1", "touch /tmp/compat-denied-marker")),
            reply(Text("The command was not allowed.")),
        ]
    )
    run = home.run("create a marker file", script, "--permission-mode", "default", skip_permissions=False)
    return _claude_fresh("permission-denied", home, run)


def claude_subagent(home: ClaudeCodeHome) -> FreshFile:
    """The Agent tool: a sub-agent runs a Bash call and answers; the main agent reads its result."""
    script = Script(
        main=[
            reply(
                Text("Delegating."),
                ToolUse(
                    "toolu_agent_1",
                    "Agent",
                    {
                        "description": "echo in a sub-agent",
                        "prompt": f"{SUBAGENT_MARKER} Run `echo from-subagent` and report the output.",
                        "subagent_type": "general-purpose",
                    },
                ),
            ),
            reply(Text("The sub-agent reported from-subagent.")),
        ],
        subagent=[
            reply(Text("Running it."), bash("toolu_sub_1", "echo from-subagent")),
            reply(Text("The output was: from-subagent")),
        ],
    )
    return _claude_fresh("subagent", home, home.run("use a sub-agent to echo", script))


def claude_fresh_files(make_home: HomeFactory) -> list[FreshFile]:
    """Every Claude Code scenario of the suite, in as few client homes as their continuity needs."""
    base = make_home("base")
    first = claude_parallel_tools(base)
    resumed = claude_resumed(base, first.run.session_id())
    continued = claude_continued(base)
    forked = claude_forked(base, first.run.session_id())
    denied = claude_permission_denied(make_home("denied"))
    subagent = claude_subagent(make_home("subagent"))
    return [first, resumed, continued, forked, denied, subagent]


def pi_fresh_files(home: PiHome) -> list[FreshFile]:
    """pi sessions: thinking with parallel tools (one failing), then a continued session (``--continue``)."""
    script = Script(
        main=[
            reply(
                Thinking("Read and list.", "sig-pi-1"),
                Text("Looking."),
                ToolUse("toolu_pi_1", "bash", {"command": "echo pi-ok"}),
                ToolUse("toolu_pi_2", "bash", {"command": "exit 2"}),
            ),
            reply(Thinking("Done.", "sig-pi-2"), Text("One ok, one failed.")),
        ]
    )
    first_run = home.run("run two commands", script)
    files = home.session_files()
    if len(files) != 1:
        raise ClientFailed(f"pi wrote {len(files)} session files, expected 1")
    path = files[0]
    first_last = last_main_request(first_run)
    assert first_last.body is not None
    first = FreshFile("pi-tools-thinking", path, first_last.body, pi_request_leaf(path, first_last), first_run)
    second_run = home.run(
        "again", Script(main=[reply(Thinking("Again.", "sig-pi-3"), Text("Again done."))]), "--continue"
    )
    second_last = last_main_request(second_run)
    assert second_last.body is not None
    second = FreshFile("pi-continue", path, second_last.body, pi_request_leaf(path, second_last), second_run)
    return [first, second]
