"""A soak run on demand (issue 25): the whole bus under faults for minutes, judged at the source.

    uv run python bench/soak.py --minutes 3            # a private redis-server (appendonly), restarted once
    uv run python bench/soak.py --minutes 3 --cluster  # a private 3-master cluster with replicas, failed over

What runs: two of every worker type (`agentbus worker NAME` processes, as tests/integration's WorkerCluster
starts them), the model workers split between two model servers in their own processes — our fake model
(`agentbus fake-model`, scripted per session: parallel tool calls, side-effecting Bash, sub-agents through the
Agent tool) and the third-party `llmock` (its Anthropic endpoint, `llmock serve`, with its HTTP error rates
and every stream fault it ships mixed in at a rate). Many sessions at once talk through the SDK
(`bus.converse()`), several turns each. Every TTL and lease is short, so each expires and renews many times:
tool catalog entries, shard leases, session call leases, claim idle. Faults on a schedule during the first
part of the run: SIGKILL of a worker of every type in turn (each restarted), a Redis SIGKILL and restart
on the same append-only file, and with --cluster a CLUSTER FAILOVER and a killed master. Then the faults
stop, the sessions finish, and every turn must end within --hang-bound-s.

What is counted, at the source where it can be:
- lost: a prompt the client published (its publish returned) whose message never reached the session's log;
- duplicated: a session whose log or transcript holds one uuid twice;
- hung: a turn whose end never came (within the bound after the faults stopped);
- invalid: a transcript (sub-agents' too) that `agentbus transcript verify` rejects, or whose resumed request
  (normalize + one more prompt) fails `validate_api_request`;
- side effects twice: a Bash `echo MARKER >> effects.log` whose marker is in the file more than once;
- usage mismatch: a session tree whose `agentbus usage --tree` call count differs from the calls the two
  model servers answered completely for it (their own request journals, keyed by `metadata.user_id`), less
  those no worker could read (next row);
- answered but never read by a worker: a complete answer whose bytes no worker read to the end, so no
  worker can know its usage — the worker that made the call was SIGKILLed while it was in flight or just
  answered (the server's journal times against the kill times), or it stopped reading at a fault (llmock's
  ``malformed``: a corrupt event breaks the stream, M5.1; ``stall``: the idle watchdog cut it). A tree's
  shortfall (answered − recorded) is put here only up to the number of such calls it had, each listed with
  its evidence; any other difference is a usage mismatch;
- ConnectionErrors: a connection error that reached the caller of `converse()` (and, apart, any other
  exception that did: a failover's `UNBLOCKED`, a `ConversationTimeout`);
- requests without tools: requests the model servers received with no `tools` (the catalog had expired).

Exit status 1 when any of them is not zero. The working directory (logs, transcripts, report.json) is
printed and kept with --keep.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentbus_redis.agents.ids import agent_id_for, child_session_id
from agentbus_redis.api.validation import validate_api_request
from agentbus_redis.local.redis_cluster import LocalRedisCluster, start_local_cluster
from agentbus_redis.local.redis_server import LocalRedis, free_port, start_local_redis
from agentbus_redis.messages.kinds import TombstoneMessage
from agentbus_redis.sdk.client import AgentbusClient
from agentbus_redis.sdk.conversation import ConversationTimeout
from agentbus_redis.transcript import read_transcript, verify_transcript
from agentbus_redis.transcript_files.api_view import api_view_of_transcript
from agentbus_redis.transcript_files.layout import session_file, subagent_dir
from tests.integration.cluster import TEST_ALLOW_RULES, Worker, WorkerCluster
from tests.integration.fake_model import FakeModelProcess, start_fake_model
from tests.integration.model_turns import reply, text, tool_use, turn_ended

EFFECTS_FILE = "effects.log"
WORKER_ROLES = ("ingestion", "normalization", "transcripts", "tools", "model", "model-llmock")
LLMOCK_ERROR_RATES = {429: 0.03, 500: 0.03, 529: 0.04}
"""llmock's HTTP faults, per request (its --error-rate)."""
LLMOCK_STREAM_FAULTS = {"disconnect": 0.05, "truncate": 0.05, "malformed": 0.03, "stall": 0.03}
"""llmock's stream faults, per streamed response: every kind it ships (its --stream-fault)."""
SHORT_TIMINGS = {
    # Everything that expires does so many times in a run of minutes.
    "AGENTBUS_TOOLS__CATALOG_REFRESH_S": "1",
    "AGENTBUS_TOOLS__CATALOG_TTL_S": "3",
    "AGENTBUS_LANE__LEASE_TTL_MS": "2000",
    "AGENTBUS_LANE__RENEW_INTERVAL_MS": "300",
    "AGENTBUS_MODEL__SESSION_LEASE_MS": "1500",
    "AGENTBUS_CONSUMER__CLAIM_MIN_IDLE_MS": "1500",
    "AGENTBUS_CONSUMER__CLAIM_INTERVAL_S": "0.5",
    # A stalled stream (llmock's stall) fails over to the M5 retry quickly; retries are short.
    "AGENTBUS_MODEL__STREAM_IDLE_TIMEOUT_S": "4",
    "AGENTBUS_MODEL__REQUEST_TIMEOUT_S": "30",
    "AGENTBUS_MODEL__NONSTREAMING_TIMEOUT_S": "30",
    "AGENTBUS_MODEL__RETRY_BASE_DELAY_MS": "100",
    "AGENTBUS_MODEL__RETRY_MAX_DELAY_MS": "2000",
    "AGENTBUS_TOOLS__DEADLINE_S": "30",
    "AGENTBUS_TOOLS__TIMEOUT_S": "5",
}
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (ConnectionError, redis.ConnectionError, redis.TimeoutError)
KILL_READ_WINDOW_S = 5.0
"""An answer the server finished this long before a model worker of its server was SIGKILLed may not have been
read (or its usage written) yet by that worker: the machine is shared and busy."""
UNREADABLE_FAULTS = {
    "malformed": "the worker stopped reading at a corrupt event (M5.1) unless it was a ping",
    "stall": "the idle watchdog cut the stream (M2.8) before the server finished it",
}
SERVER_OF_ROLE = {"model": "fake-model", "model-llmock": "llmock"}


# -- the deployment ------------------------------------------------------------------------------------------


class SoakWorkers(WorkerCluster):
    """WorkerCluster whose model workers come in two roles: ``model`` (the fake model) and ``model-llmock``."""

    role_env: dict[str, dict[str, str]]

    def start_role(self, role: str) -> Worker:
        kind = "model" if role.startswith("model") else role
        saved = dict(self.extra_env)
        self.extra_env.update(self.role_env.get(role, {}))
        try:
            (worker,) = self.start(kind)
        finally:
            self.extra_env = saved
        worker.name = role
        return worker


@dataclass
class RedisTarget:
    """The private Redis of the run: one server (AOF) or a cluster with one replica per master."""

    single: LocalRedis | None = None
    cluster: LocalRedisCluster | None = None

    @property
    def url(self) -> str:
        return self.cluster.url if self.cluster is not None else self.single.url  # type: ignore[union-attr]

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()
        if self.single is not None:
            self.single.stop()


@dataclass
class ModelServers:
    fake: FakeModelProcess
    llmock: subprocess.Popen[bytes] | None
    llmock_url: str | None

    def stop(self) -> None:
        self.fake.stop()
        if self.llmock is not None and self.llmock.poll() is None:
            self.llmock.terminate()
            try:
                self.llmock.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.llmock.kill()
                self.llmock.wait()


def start_llmock(root: Path, *, timeout_s: float = 30.0) -> tuple[subprocess.Popen[bytes], str]:
    """`llmock serve` on a free loopback port, faults mixed in at the rates above; waits for /health."""
    port = free_port()
    args = [str(Path(sys.executable).with_name("llmock")), "serve", "--host", "127.0.0.1", "--port", str(port)]
    args += ["--log-level", "warning", "--response-style", "echo", "--tool-mode", "auto"]
    for status, rate in LLMOCK_ERROR_RATES.items():
        args += ["--error-rate", f"{status}={rate}"]
    for kind, rate in LLMOCK_STREAM_FAULTS.items():
        args += ["--stream-fault", f"{kind}={rate}"]
    args += ["--stream-stall-seconds", "8"]
    log = (root / "llmock.log").open("wb")
    process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=root)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"llmock exited: {(root / 'llmock.log').read_text(errors='replace')[-2000:]}")
        with contextlib.suppress(OSError), urllib.request.urlopen(url + "/health", timeout=1) as answer:
            if answer.status == 200:
                return process, url
        time.sleep(0.1)
    process.kill()
    raise RuntimeError("llmock did not answer /health in time")


def llmock_journal(url: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(url + "/_llmock/requests", timeout=60) as answer:
        return list(json.loads(answer.read())["requests"])


# -- what the sessions do --------------------------------------------------------------------------------------


@dataclass
class TurnRecord:
    session: str
    turn: int
    prompt_uuid: str
    published: bool = False
    ended_by_converse: bool = False
    connection_error: str | None = None
    other_error: str | None = None
    ended: bool = False


@dataclass
class Run:
    args: argparse.Namespace
    root: Path
    workers: SoakWorkers
    target: RedisTarget
    servers: ModelServers
    turns: list[TurnRecord] = field(default_factory=list)
    sessions: list[str] = field(default_factory=list)
    markers: list[str] = field(default_factory=list)
    faults: Counter[str] = field(default_factory=Counter)
    kills: list[tuple[str, float, float]] = field(default_factory=list)
    """(role, time.monotonic(), time.time()) of each SIGKILL of a worker."""
    faults_over: asyncio.Event = field(default_factory=asyncio.Event)


def bash_effect(run: Run, tool_id: str, marker: str) -> dict[str, Any]:
    run.markers.append(marker)
    return tool_use(tool_id, "Bash", command=f"echo {marker} >> {EFFECTS_FILE}", description="record a marker")


def script_turn(run: Run, session: str, turn: int) -> None:
    """The fake model's steps for one turn (consumed by whichever of its requests reach the fake model)."""
    kind = turn % 3
    tid = f"toolu_{session.replace('-', '')}_{turn}"
    if kind == 0:  # parallel calls: two side effects and a read-only one
        steps = [
            reply(
                text("Recording two markers and listing files."),
                bash_effect(run, f"{tid}a", f"{session}-{turn}-a"),
                bash_effect(run, f"{tid}b", f"{session}-{turn}-b"),
                tool_use(f"{tid}c", "Glob", pattern="*"),
            ),
            reply(text(f"Turn {turn} done.")),
        ]
    elif kind == 1:  # a sub-agent beside a side effect; the child records one too
        agent_tool = f"{tid}g"
        child = child_session_id(session, agent_id_for(session, agent_tool))
        steps = [
            reply(
                text("Asking a helper."),
                tool_use(agent_tool, "Agent", description="record marker", prompt="Record a marker."),
                bash_effect(run, f"{tid}a", f"{session}-{turn}-a"),
            ),
            reply(text(f"Turn {turn} done with the helper.")),
        ]
        run.servers.fake.script(
            child,
            [
                reply(bash_effect(run, f"{tid}ca", f"{child}-c")),
                reply(text("Marker recorded.")),
            ],
        )
    else:
        steps = [reply(text(f"Plain answer for turn {turn}."))]
    run.servers.fake.script(session, steps)


async def run_session(run: Run, bus: AgentbusClient, session: str, stop_at: float) -> None:
    for turn in range(run.args.turns):
        if time.monotonic() > stop_at:
            return
        await asyncio.to_thread(script_turn, run, session, turn)
        record = TurnRecord(session, turn, str(uuid.uuid4()))
        run.turns.append(record)
        prompt = f"soak {session} turn {turn}: glob the files"
        conversation = bus.converse(session, prompt, uuid=record.prompt_uuid, timeout_s=run.args.hang_bound_s)
        try:
            async for event in conversation:
                if event.type == "turn_end":
                    record.ended_by_converse = True
        except CONNECTION_ERRORS as error:
            record.connection_error = f"{type(error).__name__}: {error}"
        except ConversationTimeout as error:
            record.other_error = f"ConversationTimeout: {error}"
        except Exception as error:  # counted and shown, never hidden
            record.other_error = f"{type(error).__name__}: {error}"
        finally:
            sending = conversation._sending  # the client's own publish: did it return?
            record.published = sending is not None and sending.done() and sending.exception() is None
            with contextlib.suppress(Exception):
                await conversation.aclose()
        # A turn converse() did not see end may still end on the bus: wait for it before the next prompt
        # (which would queue behind it); a hung session takes no more prompts.
        unseen_end = record.published and not record.ended_by_converse
        if unseen_end and not await wait_turn_end(bus, record, run.args.hang_bound_s):
            return


async def wait_turn_end(bus: AgentbusClient, record: TurnRecord, bound_s: float) -> bool:
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):  # Redis may be down for a moment: keep asking
            if turn_of(await bus.history(record.session), record.prompt_uuid) == "ended":
                return True
        await asyncio.sleep(0.5)
    return False


def turn_of(history: list[Any], prompt_uuid: str) -> str:
    """``absent`` (the prompt is not in the log), ``ended`` or ``open``: the turn the prompt started is judged
    on the log up to the next prompt (turns of a session are sequential here)."""
    start = next((i for i, e in enumerate(history) if getattr(e.message, "uuid", None) == prompt_uuid), None)
    if start is None:
        return "absent"
    end = next(
        (
            i
            for i in range(start + 1, len(history))
            if history[i].message.type == "user"
            and str(getattr(history[i].message, "uuid", "")) != prompt_uuid
            and is_prompt(history[i].message)
        ),
        len(history),
    )
    return "ended" if turn_ended(history[:end]) else "open"


def is_prompt(message: Any) -> bool:
    """A human prompt of the harness (not a tool result, not meta)."""
    content = getattr(message, "message", None)
    body = getattr(content, "content", None)
    return isinstance(body, str) and body.startswith("soak ")


async def drive_sessions(run: Run, bus: AgentbusClient) -> None:
    stop_at = time.monotonic() + run.args.minutes * 60
    counter = 0
    running: set[asyncio.Task[None]] = set()
    while time.monotonic() < stop_at or running:
        while time.monotonic() < stop_at and len(running) < run.args.concurrency:
            counter += 1
            session = f"soak-{run.args.tag}-{counter:04d}"
            run.sessions.append(session)
            running.add(asyncio.ensure_future(run_session(run, bus, session, stop_at)))
        done, running = await asyncio.wait(running, timeout=1.0, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task.exception() is not None:
                print(f"soak: a session runner failed: {task.exception()!r}", file=sys.stderr)


# -- faults ------------------------------------------------------------------------------------------------------


async def restart_role(run: Run, worker: Worker) -> None:
    run.workers.kill(worker)
    run.kills.append((worker.name, time.monotonic(), time.time()))
    run.faults[f"SIGKILL {worker.name}"] += 1
    await asyncio.sleep(0.5)
    await asyncio.to_thread(run.workers.start_role, worker.name)


async def redis_fault(run: Run) -> None:
    target = run.target
    if target.single is not None:
        target.single.stop(kill=True)
        run.faults["redis SIGKILL + restart (same AOF)"] += 1
        await asyncio.sleep(1.0)
        await asyncio.to_thread(target.single.start)
        return
    nodes = target.cluster
    assert nodes is not None
    # A graceful failover: a replica takes over its master (CLUSTER FAILOVER)...
    replica = next(n for n in nodes.nodes if n.running and n not in nodes.masters_now())
    with replica.client() as client:
        client.execute_command("CLUSTER", "FAILOVER")
    run.faults["cluster: CLUSTER FAILOVER on a replica"] += 1
    await asyncio.to_thread(nodes.wait_ok)
    await asyncio.sleep(3.0)
    # ... then a master is SIGKILLed: its replica is promoted; the old master rejoins as a replica.
    master = random.choice(nodes.masters_now())
    master.stop(kill=True)
    run.faults["cluster: SIGKILL of a master (failed over)"] += 1
    await asyncio.to_thread(nodes.wait_failed_over, master)
    await asyncio.to_thread(nodes.restart, master)


async def fault_schedule(run: Run) -> None:
    """Kill one worker of each role in turn every --fault-every-s seconds; the Redis fault in the middle."""
    fault_phase_s = run.args.minutes * 60 * run.args.fault_share
    started = time.monotonic()
    redis_at = started + fault_phase_s * 0.5
    redis_done = False
    index = 0
    try:
        while time.monotonic() - started < fault_phase_s:
            await asyncio.sleep(run.args.fault_every_s)
            if not redis_done and time.monotonic() >= redis_at:
                redis_done = True
                await redis_fault(run)
                continue
            role = WORKER_ROLES[index % len(WORKER_ROLES)]
            index += 1
            live = run.workers.of(role)
            if live:
                await restart_role(run, random.choice(live))
        if not redis_done:
            await redis_fault(run)
        for role in WORKER_ROLES:  # a short run still kills every worker type once
            live = run.workers.of(role)
            if live and not run.faults[f"SIGKILL {role}"]:
                await restart_role(run, random.choice(live))
    finally:
        run.faults_over.set()


# -- the verdict -------------------------------------------------------------------------------------------------


def tree_sessions(root: Any) -> list[str]:
    out = [root.session_id]
    for child in root.children:
        out += tree_sessions(child)
    return out


def session_of_body(body: Any) -> str | None:
    metadata = body.get("metadata") if isinstance(body, dict) else None
    user_id = metadata.get("user_id") if isinstance(metadata, dict) else None
    try:
        parsed = json.loads(user_id) if isinstance(user_id, str) else None
    except ValueError:
        return None
    return parsed.get("session_id") if isinstance(parsed, dict) else None


@dataclass
class ServerCalls:
    """What the model servers' journals say, per session: complete answers, and among them those no worker may
    have read (each with its evidence)."""

    answered: Counter[str] = field(default_factory=Counter)
    unreadable: dict[str, list[str]] = field(default_factory=dict)
    without_tools: int = 0
    seen: Counter[str] = field(default_factory=Counter)


def killed_during(run: Run, server: str, started: float, ended: float, *, clock: int) -> str | None:
    """The SIGKILL of a model worker of ``server`` while the call was in flight or just answered (``clock``: 1
    for monotonic times, 2 for epoch times), as evidence text; None when there was none."""
    for role, *times in run.kills:
        at = times[clock - 1]
        if SERVER_OF_ROLE.get(role) == server and started <= at and ended >= at - KILL_READ_WINDOW_S:
            return f"a {role} worker SIGKILLed {at - ended:+.2f} s after the server finished the answer"
    return None


def answered_calls(run: Run) -> ServerCalls:
    """Per session, the calls the model servers answered completely, by their own journals; which of those
    no worker may have read; how many requests came without tools; what each server saw (for the report)."""
    out = ServerCalls()
    calls: list[dict[str, Any]] = []  # kept in the working directory, to trace a mismatch
    for record in run.servers.fake.admin.requests(settled=True):
        out.seen[f"fake-model {record.step_kind} {record.ended}"] += 1
        body = record.body if isinstance(record.body, dict) else {}
        out.without_tools += not body.get("tools")
        complete = record.ended == "answered" and record.step_kind not in ("http_error", "hang")
        ended_ms = record.ended_at_ms if record.ended_at_ms is not None else record.at_ms
        why = killed_during(run, "fake-model", record.at_ms / 1000, ended_ms / 1000, clock=2) if complete else None
        if complete and record.session_id:
            out.answered[record.session_id] += 1
            if why is not None:
                out.unreadable.setdefault(record.session_id, []).append(f"fake-model call at {record.at_ms:.0f}: {why}")
        calls.append(
            {"server": "fake-model", "session": record.session_id, "at_ms": record.at_ms, "ended_at_ms": ended_ms}
            | {"complete": complete, "outcome": f"{record.step_kind} {record.ended}", "tools": bool(body.get("tools"))}
            | {"client_request_id": record.headers.get("x-client-request-id"), "unreadable": why}
        )
    if run.servers.llmock_url is not None:
        for row in llmock_journal(run.servers.llmock_url):
            if not str(row.get("path", "")).endswith("/v1/messages"):
                continue
            fault = str(row.get("fault") or "")
            out.seen[f"llmock {row.get('status')} {fault or 'clean'}"] += 1
            sent: Any = row.get("body") if isinstance(row.get("body"), dict) else {}
            out.without_tools += not sent.get("tools")
            session = session_of_body(sent)
            complete = row.get("status") == 200 and bool(row.get("completed"))
            why = None
            if complete:
                kind = fault.removeprefix("stream:").partition("@")[0] if fault.startswith("stream:") else ""
                why = UNREADABLE_FAULTS.get(kind) or killed_during(
                    run, "llmock", float(row["started_at"]), float(row["ended_at"]), clock=1
                )
            if complete and session:
                out.answered[session] += 1
                if why is not None:
                    out.unreadable.setdefault(session, []).append(f"llmock #{row.get('seq')} {fault or 'clean'}: {why}")
            calls.append(
                {"server": "llmock", "session": session, "seq": row.get("seq"), "complete": complete}
                | {"outcome": f"{row.get('status')} {fault or 'clean'}", "tools": bool(sent.get("tools"))}
                | {"chunks_sent": row.get("chunks_sent"), "stall_waited": row.get("stall_waited"), "unreadable": why}
            )
    with (run.root / "model-calls.jsonl").open("w") as journal:
        journal.writelines(json.dumps(call) + "\n" for call in calls)
        journal.writelines(json.dumps({"kill": role, "monotonic": m, "epoch": e}) + "\n" for role, m, e in run.kills)
    return out


def transcript_problems(path: Path) -> list[str]:
    """Why a transcript is invalid: `transcript verify` errors, duplicate uuids, an unsendable resume."""
    data = path.read_bytes()
    problems: list[str] = []
    report = verify_transcript(read_transcript(data))
    if not report.ok:
        problems += [f"verify: {issue}" for issue in report.errors][:3]
    try:
        view = api_view_of_transcript(data, prompt="soak: one more turn")
        violations = validate_api_request(view.messages_body)
        problems += [f"validate_api_request: {v.rule} {v.detail}" for v in violations][:3]
    except Exception as error:
        problems.append(f"normalize: {type(error).__name__}: {error}")
    return problems


def duplicate_uuids(lines: list[str | None]) -> int:
    counts = Counter(u for u in lines if u)
    return sum(n - 1 for n in counts.values() if n > 1)


async def judge(run: Run, bus: AgentbusClient) -> dict[str, Any]:
    bound = run.args.hang_bound_s
    # Every turn must end: those not seen ending get the bound, counted from when the faults stopped.
    deadline = time.monotonic() + bound
    open_turns = [t for t in run.turns if t.published]
    while time.monotonic() < deadline:
        pending = []
        for turn in open_turns:
            with contextlib.suppress(Exception):
                state = turn_of(await bus.history(turn.session), turn.prompt_uuid)
                turn.ended = state == "ended"
            if not turn.ended:
                pending.append(turn)
        if not pending:
            break
        open_turns = pending
        await asyncio.sleep(1.0)

    lost, hung, details = [], [], []
    for turn in run.turns:
        state = turn_of(await bus.history(turn.session), turn.prompt_uuid)
        if state == "absent" and turn.published:
            lost.append(turn)
            details.append(f"lost: {turn.session} turn {turn.turn}")
        elif state == "open":
            hung.append(turn)
            details.append(f"hung: {turn.session} turn {turn.turn}")

    duplicated_sessions: set[str] = set()
    invalid_sessions: set[str] = set()
    checked = 0
    data_dir, cwd = run.workers.data_dir, run.workers.cwd  # where the transcripts worker writes (AGENTBUS_CWD)
    for session in run.sessions:
        history = await bus.history(session)
        log_uuids: list[str | None] = [
            str(getattr(e.message, "uuid", "")) for e in history if not isinstance(e.message, TombstoneMessage)
        ]
        if duplicate_uuids(log_uuids):
            duplicated_sessions.add(session)
            details.append(f"duplicated: {session} log has {duplicate_uuids(log_uuids)} repeated uuid(s)")
        # The product's own layout: <data>/projects/<sanitized cwd>/<Claude Code UUID>.jsonl, its sub-agents'
        # files under <uuid>/subagents/ (every sub-agent of the tree, grandchildren included).
        main = session_file(data_dir, cwd, session)
        files = [main] if main.exists() else []
        if not main.exists():
            invalid_sessions.add(session)
            details.append(f"invalid: {session} ({main.name}): no transcript")
        children = subagent_dir(data_dir, cwd, session)
        if children.is_dir():
            files += sorted(children.rglob("agent-*.jsonl"))
        for path in files:
            checked += 1
            problems = transcript_problems(path)
            uuids = [json.loads(line).get("uuid") for line in path.read_text().splitlines() if line.strip()]
            if duplicate_uuids(uuids):
                duplicated_sessions.add(session)
                details.append(f"duplicated: {session} {path.name} has {duplicate_uuids(uuids)} repeated uuid(s)")
            if problems:
                invalid_sessions.add(session)
                details.append(f"invalid: {session} {path.name}: {'; '.join(problems)}")

    effects = run.workers.workspace / EFFECTS_FILE
    lines = Counter(effects.read_text().split()) if effects.exists() else Counter()
    twice = {marker: n for marker, n in lines.items() if n > 1}
    details += [f"side effect x{n}: {marker}" for marker, n in sorted(twice.items())]

    server = answered_calls(run)
    usage_mismatches = 0
    recorded_total = answered_total = unread_total = 0
    for session in run.sessions:
        tree = await bus.session_tree(session)
        members = tree_sessions(tree)
        recorded = (await bus.tree_usage(session)).total.requests
        billed = sum(server.answered[s] for s in members)
        evidence = [f"{s}: {line}" for s in members for line in server.unreadable.get(s, [])]
        recorded_total += recorded
        answered_total += billed
        shortfall = billed - recorded
        if 0 < shortfall <= len(evidence):
            unread_total += shortfall
            details.append(f"never read: {session} {shortfall} of {len(evidence)} call(s) " + " | ".join(evidence))
        elif shortfall:
            usage_mismatches += 1
            details.append(
                f"usage: {session} recorded {recorded} calls, the servers answered {billed}"
                + (f" ({len(evidence)} possibly never read: {' | '.join(evidence)})" if evidence else "")
            )

    connection_errors = [t for t in run.turns if t.connection_error]
    details += [f"ConnectionError: {t.session} turn {t.turn}: {t.connection_error}" for t in connection_errors]
    details += [f"other error: {t.session} turn {t.turn}: {t.other_error}" for t in run.turns if t.other_error]
    return {
        "rows": {
            "sessions run": len(run.sessions),
            "turns (prompts)": len(run.turns),
            "lost": len(lost),
            "duplicated": len(duplicated_sessions),
            "hung": len(hung),
            "invalid": len(invalid_sessions),
            "side effects run twice": len(twice),
            "usage mismatch": usage_mismatches,
            "answered but never read by a worker (killed, or reading stopped at a fault)": unread_total,
            "ConnectionError to caller": len(connection_errors),
            "other errors to caller": sum(1 for t in run.turns if t.other_error),
            "requests without tools": server.without_tools,
        },
        "context": {
            "transcripts checked (main + sub-agents)": checked,
            "side effects run (markers in file)": len(lines),
            "side effects scripted": len(set(run.markers)),
            "calls recorded (usage, all trees)": recorded_total,
            "calls answered (servers)": answered_total,
            "calls answered that no worker may have read (killed, malformed, stalled)": sum(
                len(v) for v in server.unreadable.values()
            ),
            "faults": dict(run.faults),
            "model server outcomes": dict(sorted(server.seen.items())),
        },
        "details": details,
    }


FAILING_ROWS = (
    "lost",
    "duplicated",
    "hung",
    "invalid",
    "side effects run twice",
    "usage mismatch",
    "ConnectionError to caller",
    "other errors to caller",
    "requests without tools",
)


def print_table(verdict: dict[str, Any]) -> None:
    rows = verdict["rows"]
    width = max(len(name) for name in rows)
    print(f"| {'what':<{width}} | count |")
    print(f"| {'-' * width} | ----: |")
    for name, value in rows.items():
        print(f"| {name:<{width}} | {value:>5} |")
    for name, value in verdict["context"].items():
        print(f"{name}: {value}")


# -- main ----------------------------------------------------------------------------------------------------------


def deploy(args: argparse.Namespace, root: Path) -> tuple[RedisTarget, ModelServers, SoakWorkers]:
    if args.cluster:
        target = RedisTarget(cluster=start_local_cluster(root / "redis-cluster", replicas=1))
    else:
        target = RedisTarget(single=start_local_redis(root / "redis", appendonly=True))
    fake = start_fake_model(root / "fake-model.log", script="echo")
    llmock, llmock_url = start_llmock(root) if args.llmock_workers else (None, None)
    servers = ModelServers(fake, llmock, llmock_url)
    workers = SoakWorkers(redis_url=target.url, root=root)
    allow = [*TEST_ALLOW_RULES, "Agent"]
    workers.extra_env.update(
        {**SHORT_TIMINGS, "ANTHROPIC_API_KEY": "sk-ant-soak", "AGENTBUS_TOOLS__ALLOW": json.dumps(allow)}
    )
    if args.catalog_ttl_s is not None:  # e.g. to see the rest of the run with tools offered despite issue 25.1
        workers.extra_env["AGENTBUS_TOOLS__CATALOG_TTL_S"] = str(args.catalog_ttl_s)
    workers.role_env = {"model": {"AGENTBUS_MODEL__BASE_URL": fake.base_url}}
    if llmock_url is not None:
        workers.role_env["model-llmock"] = {"AGENTBUS_MODEL__BASE_URL": llmock_url + "/anthropic"}
    for role in WORKER_ROLES:
        count = args.llmock_workers if role == "model-llmock" else 2
        for _ in range(count):
            workers.start_role(role)
    workers.wait_ready()
    (workers.workspace / "README.md").write_text("# soak\n", encoding="utf-8")
    return target, servers, workers


async def soak(args: argparse.Namespace, root: Path) -> int:
    # SIGTERM as Ctrl-C: the run is cancelled and its finally blocks stop every process it started.
    main_task = asyncio.current_task()
    assert main_task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main_task.cancel)
    target, servers, workers = await asyncio.to_thread(deploy, args, root)
    run = Run(args, root, workers, target, servers)
    try:
        bus = workers.client()
        try:
            faults = asyncio.ensure_future(fault_schedule(run))
            await drive_sessions(run, bus)
            await faults
            verdict = await judge(run, bus)
        finally:
            with contextlib.suppress(Exception):
                await bus.close()
    finally:
        await asyncio.to_thread(workers.stop)
        servers.stop()
        target.stop()
    (root / "report.json").write_text(json.dumps(verdict, indent=2))
    print_table(verdict)
    for line in verdict["details"][: args.show]:
        print("  " + line)
    if len(verdict["details"]) > args.show:
        print(f"  … {len(verdict['details']) - args.show} more in {root / 'report.json'}")
    failing = {name: verdict["rows"][name] for name in FAILING_ROWS if verdict["rows"][name]}
    print(f"soak: {'FAILED ' + json.dumps(failing) if failing else 'OK'} ({root})")
    return 1 if failing else 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=3.0, help="how long sessions are started (default 3)")
    parser.add_argument("--cluster", action="store_true", help="a 3-master Redis Cluster with replicas")
    parser.add_argument("--concurrency", type=int, default=6, help="sessions talking at once")
    parser.add_argument("--turns", type=int, default=3, help="turns (prompts) per session")
    parser.add_argument("--fault-every-s", type=float, default=5.0, help="seconds between two worker kills")
    parser.add_argument("--fault-share", type=float, default=0.6, help="part of the run with faults (then quiet)")
    parser.add_argument("--hang-bound-s", type=float, default=90.0, help="a turn not ended this long is hung")
    parser.add_argument("--llmock-workers", type=int, default=2, help="model workers on llmock (0: none)")
    parser.add_argument("--catalog-ttl-s", type=float, default=None, help="override the tool catalog TTL (3 s)")
    parser.add_argument("--root", type=Path, default=None, help="working directory (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the working directory")
    parser.add_argument("--show", type=int, default=40, help="detail lines printed")
    args = parser.parse_args(argv)
    args.tag = uuid.uuid4().hex[:6]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    root = args.root or Path(tempfile.mkdtemp(prefix="agentbus-soak-"))
    root.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    print(f"soak: {args.minutes:g} min on {'a Redis Cluster' if args.cluster else 'one Redis'}; working dir {root}")
    code = asyncio.run(soak(args, root))
    if code == 0 and not args.keep and args.root is None:
        shutil.rmtree(root, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
