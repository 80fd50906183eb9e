"""Run the real clients offline against the capture server, each in a private home so its files land in tmp.

Claude Code (looked up in its docs: ``ANTHROPIC_BASE_URL``, ``ANTHROPIC_API_KEY``,
``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC`` stops telemetry, update checks and other side traffic,
``IS_SANDBOX=1`` lets ``--dangerously-skip-permissions`` run as root, ``CLAUDE_CONFIG_DIR`` moves
``~/.claude`` — its transcripts land in ``<config>/projects/<cwd with / as ->/<session uuid>.jsonl``).

pi (its docs/models.md and README: a ``models.json`` custom provider with ``api: "anthropic-messages"``
in the agent dir ``PI_CODING_AGENT_DIR``, ``PI_OFFLINE=1`` disables startup network operations, sessions
go to ``--session-dir``).
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tests.compat.capture_server import CaptureServer, JsonObject, RecordedRequest, Script

CLIENT_TIMEOUT_S = 300
"""A client run that never ends fails the test with its output (a generous bound: the machine is shared)."""

PI_PROVIDER = "capture"
PI_MODEL = "claude-sonnet-4-5"


class ClientFailed(AssertionError):
    pass


@dataclass
class ClientRun:
    """One client invocation: its exit, its output, and the requests the capture server got meanwhile."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    requests: list[RecordedRequest]
    """Messages requests of every lane, in arrival order."""
    main_requests: list[RecordedRequest]
    """The main conversation's Messages requests (no sub-agent, no side requests)."""

    def requests_of(self, lane: str) -> list[RecordedRequest]:
        return [request for request in self.requests if request.lane == lane]

    def events(self) -> list[JsonObject]:
        """stdout parsed as JSON lines (``--output-format stream-json`` / ``--mode json``)."""
        parsed: list[JsonObject] = []
        for line in self.stdout.splitlines():
            line = line.strip()
            if line.startswith("{"):
                parsed.append(json.loads(line))
        return parsed

    def session_id(self) -> str:
        for event in self.events():
            if isinstance(event.get("session_id"), str):
                return str(event["session_id"])
        raise ClientFailed(f"no session id in the client's output:\n{self.stdout[-2000:]}")


def _run(server: CaptureServer, script: Script, args: list[str], env: dict[str, str], cwd: Path) -> ClientRun:
    server.reset(script)
    try:
        done = subprocess.run(
            args,
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=CLIENT_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired as expired:
        raise ClientFailed(f"{args[0]} never ended within {CLIENT_TIMEOUT_S}s: {expired.stdout!r:.2000}") from expired
    run = ClientRun(
        args, done.returncode, done.stdout, done.stderr, server.message_requests(), server.message_requests("main")
    )
    if done.returncode != 0:
        raise ClientFailed(
            f"{' '.join(args[:3])}… exited {done.returncode}:\n{done.stderr[-3000:]}\n{done.stdout[-3000:]}"
        )
    return run


def _base_env(home: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "TMPDIR": str(home / "tmp"),
    }


@dataclass
class ClaudeCodeHome:
    """A private Claude Code installation state (config dir, project dir) in which runs continue each other."""

    binary: Path
    server: CaptureServer
    root: Path
    model: str = "claude-opus-5-5"
    runs: list[ClientRun] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "tmp").mkdir(exist_ok=True)
        self.project.mkdir(parents=True, exist_ok=True)

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def config_dir(self) -> Path:
        return self.home / ".claude"

    @property
    def project(self) -> Path:
        return self.root / "project"

    def env(self) -> dict[str, str]:
        return {
            **_base_env(self.home),
            "CLAUDE_CONFIG_DIR": str(self.config_dir),
            "ANTHROPIC_BASE_URL": self.server.url,
            "ANTHROPIC_API_KEY": "dummy",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "IS_SANDBOX": "1",
        }

    def run(self, prompt: str, script: Script, *extra: str, skip_permissions: bool = True) -> ClientRun:
        args = [str(self.binary), "-p", prompt, "--output-format", "stream-json", "--verbose", "--model", self.model]
        if skip_permissions:
            args.append("--dangerously-skip-permissions")
        args.extend(extra)
        run = _run(self.server, script, args, self.env(), self.project)
        self.runs.append(run)
        return run

    def transcript(self, session_id: str) -> Path:
        """The main transcript Claude Code wrote for ``session_id`` (sub-agent files live beside it)."""
        matches = sorted(self.config_dir.glob(f"projects/*/{session_id}.jsonl"))
        if not matches:
            raise ClientFailed(f"Claude Code wrote no transcript for {session_id} under {self.config_dir}")
        return matches[0]

    def subagent_transcripts(self, session_id: str) -> list[Path]:
        return sorted(self.config_dir.glob(f"projects/*/{session_id}/subagents/*.jsonl"))


def pi_models_json(base_url: str) -> JsonObject:
    """A custom provider speaking the Anthropic Messages API at the capture server (pi docs/models.md)."""
    return {
        "providers": {
            PI_PROVIDER: {
                "baseUrl": base_url,
                "api": "anthropic-messages",
                "apiKey": "dummy",
                "models": [
                    {
                        "id": PI_MODEL,
                        "name": "Capture (Anthropic Messages)",
                        "reasoning": True,
                        "input": ["text", "image"],
                        "contextWindow": 200000,
                        "maxTokens": 16000,
                        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
                    }
                ],
            }
        }
    }


@dataclass
class PiHome:
    """A private pi agent dir (with the capture provider), session dir and working directory."""

    binary: Path
    server: CaptureServer
    root: Path
    runs: list[ClientRun] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "tmp").mkdir(exist_ok=True)
        self.agent_dir.mkdir(parents=True, exist_ok=True)
        self.sessions.mkdir(parents=True, exist_ok=True)
        self.project.mkdir(parents=True, exist_ok=True)
        (self.agent_dir / "models.json").write_text(json.dumps(pi_models_json(self.server.url), indent=2))

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def agent_dir(self) -> Path:
        return self.home / ".pi" / "agent"

    @property
    def sessions(self) -> Path:
        return self.root / "sessions"

    @property
    def project(self) -> Path:
        return self.root / "project"

    def env(self) -> dict[str, str]:
        return {**_base_env(self.home), "PI_CODING_AGENT_DIR": str(self.agent_dir), "PI_OFFLINE": "1"}

    def run(self, prompt: str, script: Script, *extra: str, thinking: str = "high") -> ClientRun:
        args = [
            str(self.binary),
            "-p",
            "--mode",
            "json",
            "--provider",
            PI_PROVIDER,
            "--model",
            PI_MODEL,
            "--thinking",
            thinking,
            "--session-dir",
            str(self.sessions),
            *extra,
            prompt,
        ]
        run = _run(self.server, script, args, self.env(), self.project)
        self.runs.append(run)
        return run

    def session_files(self) -> list[Path]:
        return sorted(self.sessions.rglob("*.jsonl"))


def last_main_request(run: ClientRun) -> RecordedRequest:
    if not run.main_requests:
        raise ClientFailed("the client sent no main-conversation request")
    return run.main_requests[-1]
