"""Trimming the work streams once every group is past their entries (ecosystem.md P6: "stream trimming by
MINID after all groups passed").

Ingress, the log and the tool jobs are work queues: once every consumer group that reads a stream has
had an entry delivered and acknowledged, nothing needs it again — what stays is the session's own event
stream (its canonical history, never trimmed), the ledgers and the transcripts. Left alone they grow
with all traffic ever sent (at 1k events/s, tens of GB of Redis memory a day).

The trim point of a stream is the lowest, over every group on it (the pipeline's and any a team added,
e.g. an analytics reader), of the group's oldest pending entry or (nothing pending) the id just after
its last-delivered one. ``XTRIM MINID`` removes only ids below it: no pending entry and no entry a group
has still to read is touched, and each group's ``lag`` stays known (only entries up to its last-delivered
id go; ``XDEL`` would make it NULL, and KEDA scales on it). A stream one of whose pipeline groups does
not exist yet is not trimmed (that group will start at id 0); a group nobody reads any more holds its
stream back until it is destroyed (its lag shows it). Entries younger than ``keep_acked_ms`` stay too,
for inspecting recent work.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
import structlog

from agentbus_redis.observability import metrics
from agentbus_redis.runtime.periodic import PeriodicTask
from agentbus_redis.streams.drain import GroupPosition, group_positions, stream_id_key
from agentbus_redis.streams.entries import id_text
from agentbus_redis.streams.topology import (
    INGESTION_GROUP,
    NORMALIZATION_GROUP,
    TOOLS_GROUP,
    TRANSCRIPTS_GROUP,
    Topology,
)
from agentbus_redis.tools.pools import DEFAULT_POOL

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class TrimTarget:
    """A work stream and the groups that must all be past an entry before it goes."""

    stream: str
    groups: tuple[str, ...]


def _next_id(entry_id: str) -> str:
    millis, sequence = stream_id_key(entry_id)
    return f"{millis}-{sequence + 1}"


def trim_point(
    positions: Mapping[str, GroupPosition], required: Iterable[str], *, now_ms: int, keep_acked_ms: int
) -> str | None:
    """The ``XTRIM MINID`` threshold of a stream (see the module docstring), or None: trim nothing."""
    if any(group not in positions for group in required):
        return None
    candidates = [f"{max(now_ms - keep_acked_ms, 0)}-0"]
    candidates += [position.oldest_pending or _next_id(position.last_delivered) for position in positions.values()]
    threshold = min(candidates, key=stream_id_key)
    return None if stream_id_key(threshold) <= (0, 1) else threshold


def work_streams(topology: Topology, tool_pools: Iterable[str] = (DEFAULT_POOL,)) -> list[TrimTarget]:
    """Every stream of the pipeline that is only a queue, with the groups that read it (the job streams of the
    tool pools named: a tool worker trims its own pool's)."""
    ingress = [TrimTarget(topology.ingress(shard), (INGESTION_GROUP,)) for shard in range(topology.shards)]
    log_streams = [
        TrimTarget(topology.log(shard), (NORMALIZATION_GROUP, TRANSCRIPTS_GROUP)) for shard in range(topology.shards)
    ]
    pools = dict.fromkeys((DEFAULT_POOL, *tool_pools))
    tool_jobs = [TrimTarget(stream, (TOOLS_GROUP,)) for pool in pools for stream in topology.tool_job_streams(pool)]
    return [*ingress, *log_streams, *tool_jobs]


class StreamTrimmer(PeriodicTask):
    """Trims ``targets`` every ``interval_s`` (three pipelined round trips per pass, whatever their number)."""

    task_name = "stream-trimmer"
    failure_event = "stream_trim_failed"

    def __init__(
        self,
        redis: aioredis.Redis,
        targets: Sequence[TrimTarget],
        *,
        keep_acked_ms: int,
        interval_s: float,
        now_ms: Callable[[], int] | None = None,
    ) -> None:
        super().__init__(interval_s)
        self.redis = redis
        self.targets = list(targets)
        self.keep_acked_ms = keep_acked_ms
        self._now_ms = now_ms if now_ms is not None else lambda: time.time_ns() // 1_000_000

    async def trim_once(self) -> dict[str, int]:
        """One pass: stream → entries removed (streams trimmed by nothing are left out)."""
        if not self.targets:
            return {}
        pipe = self.redis.pipeline(transaction=False)
        for target in self.targets:
            pipe.xinfo_groups(target.stream)
        group_replies: list[Any] = await pipe.execute(raise_on_error=False)
        infos = {
            target.stream: reply
            for target, reply in zip(self.targets, group_replies, strict=True)
            if not isinstance(reply, Exception)  # no such stream yet
        }
        pipe = self.redis.pipeline(transaction=False)
        asked: list[tuple[str, str]] = []
        for stream, reply in infos.items():
            for row in reply:
                if int(row["pending"] or 0):
                    name = id_text(row["name"])
                    pipe.xpending(stream, name)
                    asked.append((stream, name))
        pending: dict[str, dict[str, Any]] = {}
        for (stream, name), summary in zip(asked, await pipe.execute() if asked else [], strict=True):
            pending.setdefault(stream, {})[name] = summary
        now = self._now_ms()
        thresholds: list[tuple[str, str]] = []
        for target in self.targets:
            if target.stream not in infos:
                continue
            positions = group_positions(infos[target.stream], pending.get(target.stream, {}))
            threshold = trim_point(positions, target.groups, now_ms=now, keep_acked_ms=self.keep_acked_ms)
            if threshold is not None:
                thresholds.append((target.stream, threshold))
        if not thresholds:
            return {}
        pipe = self.redis.pipeline(transaction=False)
        for stream, threshold in thresholds:
            pipe.xtrim(stream, minid=threshold, approximate=False)
        removed = {stream: int(count) for (stream, _), count in zip(thresholds, await pipe.execute(), strict=True)}
        trimmed = {stream: count for stream, count in removed.items() if count}
        metrics.record_trimmed(trimmed)
        return trimmed

    async def tick(self) -> None:
        trimmed = await self.trim_once()
        if trimmed:
            log.debug("streams_trimmed", entries=sum(trimmed.values()), streams=len(trimmed))
