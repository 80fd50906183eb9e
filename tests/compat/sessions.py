"""Fresh files written by the real clients, each with the request the client itself sent for it.

Every helper runs its client against the capture server with a scripted conversation. A Claude Code
file is snapshotted when its run ends, then resumed by the client (``claude -p PROMPT --resume ID``): the
first request of that run is what Claude Code sends for the file, and ``agentbus normalize SNAPSHOT
--prompt PROMPT`` must build the same. A sub-agent's file cannot be resumed from the command line, so it
is compared with the sub-agent's own last request, built up to the line before its last reply. The compat
conftest generates each once per test session.
"""

from __future__ import annotations

import json
import shutil
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

RESUME_PROMPT = "one more thing"


@dataclass(frozen=True)
class FreshFile:
    """A client's file and the request the client sent for it.

    ``prompt`` set: ``path`` is the file as its run left it and ``request`` the client's first request on
    resuming it with ``prompt``. ``leaf`` set: ``request`` is the client's last request, built from the
    chain ending at ``leaf``."""

    name: str
    path: Path
    request: JsonObject
    run: ClientRun
    prompt: str | None = None
    leaf: str | None = None


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
    replies = [e for e in entries if isinstance(e.get("message"), dict) and e["message"].get("role") == "assistant"]
    if not replies:
        raise ClientFailed(f"{path.name} holds no assistant entry")
    return str(replies[-1]["parentId"])


@dataclass(frozen=True)
class ClaudeRun:
    """A finished Claude Code run and a snapshot of the file it left."""

    home: ClaudeCodeHome
    run: ClientRun
    snapshot: Path
    permission_args: tuple[str, ...] = ()
    """How the run was permitted (a resume in another permission mode adds a mode reminder)."""

    @property
    def session_id(self) -> str:
        return self.run.session_id()


def finished(home: ClaudeCodeHome, name: str, run: ClientRun, permission_args: tuple[str, ...] = ()) -> ClaudeRun:
    """Snapshot the run's transcript (later runs append to it) next to the home."""
    snapshots = home.root / "snapshots"
    snapshots.mkdir(exist_ok=True)
    snapshot = snapshots / f"{name}.jsonl"
    shutil.copyfile(home.transcript(run.session_id()), snapshot)
    return ClaudeRun(home, run, snapshot, permission_args)


def resumed_by(name: str, earlier: ClaudeRun, resume: ClientRun, prompt: str) -> FreshFile:
    """``earlier``'s file with the first request of ``resume``, the run that resumed it with ``prompt``."""
    if not resume.main_requests:
        raise ClientFailed(f"resuming {name} sent no request")
    first = resume.main_requests[0].body
    assert first is not None
    return FreshFile(name, earlier.snapshot, first, earlier.run, prompt=prompt)


def probe_resume(name: str, earlier: ClaudeRun) -> FreshFile:
    """Resume ``earlier``'s session once more only to record the request Claude Code sends for its file."""
    script = Script(main=[reply(Text("Noted."))])
    args = ("--resume", earlier.session_id, *earlier.permission_args)
    run = earlier.home.run(RESUME_PROMPT, script, *args, skip_permissions=not earlier.permission_args)
    return resumed_by(name, earlier, run, RESUME_PROMPT)


def bash(tool_id: str, command: str) -> ToolUse:
    return ToolUse(tool_id, "Bash", {"command": command, "description": f"run {command}"})


def claude_parallel_tools(home: ClaudeCodeHome) -> ClaudeRun:
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
    return finished(home, "parallel-tools", home.run("run two commands at once", script))


RESUMED_PROMPT = "and once more"
CONTINUED_PROMPT = "continue please"
FORKED_PROMPT = "in a fork now"


def claude_resumed(home: ClaudeCodeHome, session_id: str) -> ClaudeRun:
    """``--resume <id>`` with a new prompt: the whole history plus a new turn with a tool."""
    script = Script(
        main=[reply(Text("Checking again."), bash("toolu_resume_1", "echo resumed")), reply(Text("Resumed fine."))]
    )
    return finished(home, "resume", home.run(RESUMED_PROMPT, script, "--resume", session_id))


def claude_continued(home: ClaudeCodeHome) -> ClaudeRun:
    """``--continue``: the most recent session in the project directory, one more turn."""
    script = Script(main=[reply(Text("Continuing."))])
    return finished(home, "continue", home.run(CONTINUED_PROMPT, script, "--continue"))


def claude_forked(home: ClaudeCodeHome, session_id: str) -> ClaudeRun:
    """``--resume <id> --fork-session``: a new session id holding a copy of the history, one more turn."""
    script = Script(main=[reply(Thinking("A fork.", "sig-fork-1"), Text("Forked."))])
    run = home.run(FORKED_PROMPT, script, "--resume", session_id, "--fork-session")
    if run.session_id() == session_id:
        raise ClientFailed("--fork-session kept the session id")
    return finished(home, "fork", run)


def claude_permission_denied(home: ClaudeCodeHome) -> ClaudeRun:
    """Default permission mode in print mode: a Bash call the user never allowed is denied."""
    script = Script(
        main=[
            reply(Text("I will write a file."), bash("toolu_denied_1", "touch /tmp/compat-denied-marker")),
            reply(Text("The command was not allowed.")),
        ]
    )
    mode = ("--permission-mode", "default")
    run = home.run("create a marker file", script, *mode, skip_permissions=False)
    return finished(home, "permission-denied", run, mode)


def claude_subagent(home: ClaudeCodeHome) -> ClaudeRun:
    """The Agent tool: a sub-agent (run in the background) runs a Bash call and answers; its
    task notification starts the main agent's next turn."""
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
            reply(Text("Waiting for the sub-agent.")),
            reply(Text("The sub-agent reported from-subagent.")),
        ],
        subagent=[
            reply(Text("Running it."), bash("toolu_sub_1", "echo from-subagent")),
            reply(Text("The output was: from-subagent")),
        ],
    )
    return finished(home, "subagent", home.run("use a sub-agent to echo", script))


def subagent_file(parent: ClaudeRun) -> FreshFile:
    """The sub-agent's own transcript with its last request (built up to the line before its reply)."""
    files = parent.home.subagent_transcripts(parent.session_id)
    requests = parent.run.requests_of("subagent")
    if len(files) != 1 or not requests:
        raise ClientFailed(f"expected one sub-agent transcript and its requests, got {files} / {len(requests)}")
    last = requests[-1]
    assert last.body is not None
    return FreshFile("subagent-file", files[0], last.body, parent.run, leaf=request_leaf(files[0], last))


def claude_fresh_files(make_home: HomeFactory) -> list[FreshFile]:
    """Every Claude Code scenario of the suite, in as few client homes (and client runs) as possible:
    the runs that resume a session record the request for the file the previous run left."""
    base = make_home("base")
    first = claude_parallel_tools(base)
    resumed = claude_resumed(base, first.session_id)
    continued = claude_continued(base)
    forked = claude_forked(base, first.session_id)
    denied = claude_permission_denied(make_home("denied"))
    subagent = claude_subagent(make_home("subagent"))
    return [
        resumed_by("parallel-tools", first, resumed.run, RESUMED_PROMPT),
        resumed_by("resume", resumed, continued.run, CONTINUED_PROMPT),
        resumed_by("continue", continued, forked.run, FORKED_PROMPT),
        probe_resume("fork", forked),
        probe_resume("permission-denied", denied),
        probe_resume("subagent", subagent),
        subagent_file(subagent),
    ]


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
    first = FreshFile("pi-tools-thinking", path, first_last.body, first_run, leaf=pi_request_leaf(path, first_last))
    second_run = home.run(
        "again", Script(main=[reply(Thinking("Again.", "sig-pi-3"), Text("Again done."))]), "--continue"
    )
    second_last = last_main_request(second_run)
    assert second_last.body is not None
    second = FreshFile("pi-continue", path, second_last.body, second_run, leaf=pi_request_leaf(path, second_last))
    return [first, second]
