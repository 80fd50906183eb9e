"""``agentbus replay``: push a recorded session through the bus as its producers would.

The recorded history is resumed the way ``agentbus normalize`` resumes it (R7.14–R7.20: main chain,
parallel results recovered, interrupted turns closed), then every message is published in order as a
``recorded_message`` (assistant replies carry their recorded tool results, so no tool runs). The
command waits until ingestion and the transcript worker have settled everything, so normalizing the
persisted transcript gives the same request as normalizing the original file.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from services.client import AgentbusClient
from services.runtime.entries import id_text
from services.runtime.settings import Settings
from services.runtime.topology import INGESTION_GROUP, TRANSCRIPTS_GROUP
from services.transcripts.api_view import resume_subagent
from services.transcripts.layout import session_file
from shared.clock import utc_now
from shared.events import IngressPayload, RecordedMessage
from shared.ids import random_uuid
from shared.messages import Message
from shared.transcript import resume_session

PUBLISH_CHUNK = 500


def recorded_history(data: bytes) -> list[Message]:
    """The messages a resume of ``data`` starts from (a sub-agent file: the agent's own chain)."""
    resumed = resume_session(data, clock=utc_now, ids=random_uuid)
    if not resumed.messages:
        resumed = resume_subagent(data, clock=utc_now, ids=random_uuid) or resumed
    return list(resumed.messages)


async def replay_transcript(
    bus: AgentbusClient, data: bytes, *, session_id: str, settings: Settings, timeout_s: float
) -> Path:
    """Publish the recorded history of ``data`` into ``session_id`` and wait until it is persisted."""
    payloads: list[tuple[str, IngressPayload]] = [
        (f"replay:{getattr(message, 'uuid', index)}", RecordedMessage(message=message))
        for index, message in enumerate(recorded_history(data))
    ]
    for start in range(0, len(payloads), PUBLISH_CHUNK):
        await bus.publish_many(session_id, payloads[start : start + PUBLISH_CHUNK])
    return await wait_until_persisted(bus, session_id, settings=settings, timeout_s=timeout_s)


async def wait_until_persisted(bus: AgentbusClient, session_id: str, *, settings: Settings, timeout_s: float) -> Path:
    """Wait until ingestion and the transcript worker have settled everything published so far for
    ``session_id``'s shards; returns the session's transcript path."""
    topology = bus.topology
    deadline = time.monotonic() + timeout_s
    await _settled(bus, topology.ingress_for(session_id), INGESTION_GROUP, deadline)
    await _settled(bus, topology.log_for(session_id), TRANSCRIPTS_GROUP, deadline)
    return session_file(settings.data_dir, settings.cwd, session_id)


async def _settled(bus: AgentbusClient, stream: str, group: str, deadline: float) -> None:
    """Wait until ``group`` has read and acked everything in ``stream`` (lag 0, nothing pending)."""
    while True:
        groups: list[dict[Any, Any]] = []
        try:
            groups = await bus.redis.xinfo_groups(stream)
        except Exception:
            groups = []
        for info in groups:
            if id_text(info["name"]) == group and info.get("lag") == 0 and int(info["pending"]) == 0:
                return
        if time.monotonic() > deadline:
            msg = f"{group} has not settled {stream} in time (are the workers running? `agentbus up`)"
            raise TimeoutError(msg)
        await asyncio.sleep(0.05)
