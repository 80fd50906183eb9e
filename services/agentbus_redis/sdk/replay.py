"""``agentbus replay``: push a recorded session through the bus as its producers would.

The recorded history is resumed the way ``agentbus normalize`` resumes it (R7.14–R7.20: main chain,
parallel results recovered, interrupted turns closed), then every message is published in order as a
``recorded_message`` marked ``replayed`` (assistant replies carry their recorded tool results). A replayed
message never makes the model due (``bus/ledger.py``, ``bus/session_history.py``): no request is
published, so no model call and no tool run happens while a file is replayed, whatever the workers do
meanwhile; attachments are persisted as the file held them. With ``continue_turn`` the last message is
published as a live one, so the next turn starts if the session then waits for the model. Lines that
do not become part of that history are counted by reason (:class:`ReplayPlan`). The command waits until
ingestion and the transcript worker (with ``wait_all``: every group reading the session's log shard)
have settled everything published, so normalizing the persisted transcript gives the same request as
normalizing the original file. "Settled" is decided from entry ids (:mod:`agentbus_redis.streams.drain`).

A pi session file publishes ours (issue 17): its context at the last entry (P8) as the Claude Code
messages ``agentbus normalize`` builds its request from, so the persisted transcript's messages normalize
to exactly the request ``agentbus normalize`` prints for the pi file. Entries outside that context
(branches, compacted-away turns, model changes…) are counted as skipped.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import get_args

from agentbus_redis.bus.events import IngressPayload, RecordedMessage
from agentbus_redis.clock import utc_now
from agentbus_redis.config.settings import Settings
from agentbus_redis.ids import random_uuid
from agentbus_redis.messages.kinds import AssistantMessage, AttachmentMessage, UserMessage
from agentbus_redis.messages.system import KnownSystemMessage, OtherSystemMessage
from agentbus_redis.pi.constants import TranscriptFormat
from agentbus_redis.sdk.client import AgentbusClient
from agentbus_redis.session_ids import claude_session_id
from agentbus_redis.streams.drain import StreamProgress, stream_progress
from agentbus_redis.streams.topology import INGESTION_GROUP, TRANSCRIPTS_GROUP
from agentbus_redis.transcript import ResumeResult, TranscriptMessage, read_transcript, resume_session, skipped_lines
from agentbus_redis.transcript_files.api_view import require_conversation, resume_subagent
from agentbus_redis.transcript_files.layout import session_file
from agentbus_redis.transcript_files.pi_view import pi_context_messages, read_pi_file, transcript_format

PUBLISH_CHUNK = 500
RESUMED_TYPES = (UserMessage, AssistantMessage, AttachmentMessage, *get_args(KnownSystemMessage), OtherSystemMessage)
"""What a pi context maps to (P10: user, assistant and ``system`` lines), as the resume's message types."""


@dataclass(frozen=True, slots=True)
class ReplayPlan:
    """What a replay of one file publishes, and what it leaves out and why."""

    history: list[TranscriptMessage]
    lines_read: int
    """Non-blank lines of the file."""
    skipped: dict[str, int]
    """Lines that are not in ``history``, by reason (malformed, metadata, progress, off the chain…)."""
    added_on_resume: int = 0
    """Messages of ``history`` that are not lines of the file (R7.20: e.g. the continuation prompt of an
    interrupted turn)."""


@dataclass(frozen=True, slots=True)
class ReplayReport:
    """A finished replay: where the transcript is, and what was published."""

    session_id: str
    transcript: Path
    plan: ReplayPlan
    cwd: str = ""
    """The session's working directory: ``claude --resume`` finds the transcript when run there."""

    @property
    def claude_session_id(self) -> str:
        """The id to pass to ``claude --resume`` (the transcript's file name, a UUID)."""
        return claude_session_id(self.session_id)

    def summary(self) -> str:
        """``replayed 7 lines: 1 event published; skipped 6 off the resumed chain (R7.18)``."""
        skipped = ", ".join(f"{count} {reason}" for reason, count in sorted(self.plan.skipped.items()))
        published = len(self.plan.history)
        added = f" ({self.plan.added_on_resume} added by the resume, R7.20)" if self.plan.added_on_resume else ""
        line = f"replayed {self.plan.lines_read} line(s): {published} event(s) published{added}"
        return line + (f"; skipped {skipped}" if skipped else "")


ProgressCallback = Callable[[str, int, int], None]
"""``(phase, done, total)``: ``publish`` per chunk published; ``ingress:<groups>`` and ``log:<groups>`` (the
groups waited for) when the wait on that stream starts and each time one of its groups settles."""


def _resume(data: bytes) -> ResumeResult:
    resumed = resume_session(data, clock=utc_now, ids=random_uuid)
    if not resumed.messages:
        resumed = resume_subagent(data, clock=utc_now, ids=random_uuid) or resumed
    return resumed


def plan_replay(data: bytes, file_format: TranscriptFormat | None = None) -> ReplayPlan:
    """The history a resume of ``data`` starts from (a sub-agent file: the agent's own chain; a pi session:
    its context, see :func:`plan_pi_replay`) and the accounting of every other line. Raises
    :class:`agentbus_redis.errors.UnusableTranscript` for an empty, binary or non-JSONL file or one without a
    conversation."""
    if transcript_format(data, file_format) == "pi":
        return plan_pi_replay(data)
    resumed = _resume(data)
    require_conversation(data, resumed)
    parse = read_transcript(data)
    kept = {message.uuid for message in resumed.messages}
    skipped = skipped_lines(parse, chain_uuids=resumed.chain_uuids, kept_uuids=kept)
    in_file = {getattr(numbered.line, "uuid", None) for numbered in parse.lines}
    added = sum(1 for message in resumed.messages if message.uuid not in in_file)
    return ReplayPlan(list(resumed.messages), len(parse.lines) + len(parse.errors), dict(skipped), added)


def plan_pi_replay(data: bytes) -> ReplayPlan:
    """A pi session's context at its last entry as Claude Code messages (ours); every other entry is
    skipped as outside the context (P8), malformed lines as malformed."""
    session = read_pi_file(data)
    history = [message for message in pi_context_messages(session) if isinstance(message, RESUMED_TYPES)]
    skipped: dict[str, int] = {}
    outside = len(session.entries) - len(history)
    if outside > 0:
        skipped["entries not messages of the context at the leaf (P8)"] = outside
    malformed = sum(1 for problem in session.problems if problem.kind != "invalid_utf8")
    if malformed:
        skipped["malformed"] = malformed
    return ReplayPlan(history, 1 + len(session.entries) + malformed, skipped)


async def replay_transcript(
    bus: AgentbusClient,
    source: bytes | ReplayPlan,
    *,
    session_id: str,
    settings: Settings,
    timeout_s: float,
    wait_all: bool = False,
    progress: ProgressCallback | None = None,
    continue_turn: bool = False,
) -> ReplayReport:
    """Publish the recorded history of ``source`` (a file's bytes, or its :func:`plan_replay`) into
    ``session_id`` and wait until it is persisted (with ``wait_all``, until every group on the session's
    log shard has settled it). Nothing asks the model meanwhile; ``continue_turn`` publishes the last
    message live, so the model answers if the session waits for it (the request is published once the
    whole recording is logged). Raises :class:`agentbus_redis.errors.UnusableTranscript` for a file that is no
    transcript and ``TimeoutError`` when the groups have not settled within ``timeout_s``."""
    plan = source if isinstance(source, ReplayPlan) else plan_replay(source)
    last = len(plan.history) - 1
    payloads: list[tuple[str, IngressPayload]] = [
        (f"replay:{message.uuid}", RecordedMessage(message=message, replayed=not (continue_turn and index == last)))
        for index, message in enumerate(plan.history)
    ]
    last_id = "0-0"
    for start in range(0, len(payloads), PUBLISH_CHUNK):
        ids = await bus.publish_many(session_id, payloads[start : start + PUBLISH_CHUNK])
        last_id = ids[-1] if ids else last_id
        if progress is not None:
            progress("publish", min(start + PUBLISH_CHUNK, len(payloads)), len(payloads))
    path = await wait_until_persisted(
        bus,
        session_id,
        settings=settings,
        timeout_s=timeout_s,
        ingress_id=last_id,
        wait_all=wait_all,
        progress=progress,
    )
    return ReplayReport(session_id, path, plan, settings.session_cwd)


async def wait_until_persisted(
    bus: AgentbusClient,
    session_id: str,
    *,
    settings: Settings,
    timeout_s: float,
    ingress_id: str | None = None,
    wait_all: bool = False,
    progress: ProgressCallback | None = None,
) -> Path:
    """Wait until ingestion has settled ``session_id``'s ingress shard up to ``ingress_id`` (default: all it
    holds now), then until
    the transcript worker (``wait_all``: every group of the log shard) has settled everything ingestion
    had logged by then; returns the session's transcript path."""
    topology = bus.topology
    deadline = time.monotonic() + timeout_s
    ingress = topology.ingress_for(session_id)
    if ingress_id is None:
        current = await stream_progress(bus.redis, ingress)
        ingress_id = current.last_generated if current is not None else "0-0"
    await _settled(bus, ingress, [INGESTION_GROUP], ingress_id, deadline, _phase(progress, "ingress"))
    log = topology.log_for(session_id)
    logged = await stream_progress(bus.redis, log)
    if logged is not None:
        groups = list(logged.groups) if wait_all else [TRANSCRIPTS_GROUP]
        await _settled(bus, log, groups, logged.last_generated, deadline, _phase(progress, "log"))
    return session_file(settings.data_dir, settings.session_cwd, session_id)


def _phase(progress: ProgressCallback | None, phase: str) -> Callable[[list[str], int], None] | None:
    """``(groups, how many settled)`` → ``progress("<phase>:<groups>", settled, len(groups))``."""
    if progress is None:
        return None
    return lambda groups, settled: progress(f"{phase}:{', '.join(groups)}", settled, len(groups))


async def _settled(
    bus: AgentbusClient,
    stream: str,
    groups: list[str],
    upto: str,
    deadline: float,
    report: Callable[[list[str], int], None] | None,
) -> None:
    """Wait until each of ``groups`` has been delivered and has acked every entry of ``stream`` up to ``upto``."""
    waiting = list(groups)
    if report is not None:
        report(groups, 0)
    while waiting:
        state: StreamProgress | None = await stream_progress(bus.redis, stream)
        settled = [group for group in waiting if state is not None and state.drained(group, upto=upto)]
        if settled:
            waiting = [group for group in waiting if group not in settled]
            if report is not None:
                report(groups, len(groups) - len(waiting))
        if not waiting:
            return
        if time.monotonic() > deadline:
            names = ", ".join(waiting)
            msg = f"{names} has not settled {stream} up to {upto} in time (are the workers running? `agentbus up`)"
            raise TimeoutError(msg)
        await asyncio.sleep(0.05)
