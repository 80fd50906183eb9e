"""Every stream, group, key and channel of the pipeline, derived from one :class:`StreamNames`.

    producers ──► ingress[shard] ──► ingestion ──► log[shard] ──┬─► normalization ──► request key + requests[shard]
                      ▲                  │                       └─► transcripts ──► JSONL store
                      │                  └──► tools:jobs[shard] ──► tool workers ──┘ (results, progress)
                      └──────────────────────────────────────────────────────────────┘

Everything is sharded by session id and every key of a shard carries the shard's hash tag, so each batch
an ordered lane writes (one script) stays in one Redis Cluster slot: ingress, the log, the per-session
keys, and the shard's own tool-jobs stream, requests stream and sessions index. One owner per shard keeps
a session's events in order; the tool-jobs streams are unordered, served by competing consumers that read
every shard's stream.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentbus_redis.streams.names import StreamNames
from agentbus_redis.tools.pools import DEFAULT_POOL

INGESTION_GROUP = "ingestion"
NORMALIZATION_GROUP = "normalization"
TRANSCRIPTS_GROUP = "transcripts"
TOOLS_GROUP = "tools"
MODEL_GROUP = "model"

LANE_OF_GROUP = {
    INGESTION_GROUP: "ingress",
    NORMALIZATION_GROUP: "log",
    TRANSCRIPTS_GROUP: "log",
}
"""The sharded stream each ordered worker type reads."""


@dataclass(frozen=True, slots=True)
class Topology:
    """Names of the pipeline's streams and keys."""

    names: StreamNames

    @property
    def shards(self) -> int:
        return self.names.shards

    def ingress(self, shard: int) -> str:
        return self.names.shard_stream(shard, "ingress")

    def ingress_for(self, session_id: str) -> str:
        return self.ingress(self.names.shard_of(session_id))

    def log(self, shard: int) -> str:
        return self.names.shard_stream(shard, "log")

    def log_for(self, session_id: str) -> str:
        return self.log(self.names.shard_of(session_id))

    def tool_jobs(self, shard: int, pool: str = DEFAULT_POOL) -> str:
        """The shard's tool jobs of ``pool`` (its workers, competing consumers, read every shard's stream).
        The default pool's streams keep their name from before pools (tools/pools.py)."""
        return self.names.shard_stream(shard, _tool_jobs_name(pool))

    def tool_jobs_for(self, session_id: str, pool: str = DEFAULT_POOL) -> str:
        return self.tool_jobs(self.names.shard_of(session_id), pool)

    def tool_job_streams(self, pool: str = DEFAULT_POOL) -> list[str]:
        return self.names.shard_streams(_tool_jobs_name(pool))

    def requests(self, shard: int) -> str:
        """Notification stream of the shard: one entry per API request published for one of its sessions."""
        return self.names.shard_stream(shard, "requests")

    def requests_for(self, session_id: str) -> str:
        return self.requests(self.names.shard_of(session_id))

    def request_streams(self) -> list[str]:
        return self.names.shard_streams("requests")

    @property
    def interrupts_channel(self) -> str:
        return self.names.stream("interrupts")

    def session_events(self, session_id: str) -> str:
        """The session's own copy of its log (for ``tail`` and for rebuilding a normalizer's history)."""
        return self.names.session_key(session_id, "events")

    def ledger(self, session_id: str) -> str:
        return self.names.session_key(session_id, "ledger")

    def reply_events(self, session_id: str, request_id: str) -> str:
        """List of the raw stream events of a reply still streaming (ingestion rebuilds it from them)."""
        return self.names.session_key(session_id, "reply", request_id)

    def live_reply(self, session_id: str) -> str:
        """Stream of the text deltas of the session's replies as ingestion applies them, for watchers
        (``agentbus chat``; bus/live_reply.py). Trimmed and expiring: a view, not a record."""
        return self.names.session_key(session_id, "live")

    def seen_keys(self, session_id: str) -> str:
        """Idempotency keys ingestion has applied."""
        return self.names.session_key(session_id, "keys")

    def answered(self, session_id: str) -> str:
        """tool_use ids that have a result (tool workers skip them on a redelivered job)."""
        return self.names.session_key(session_id, "answered")

    def tool_runs(self, session_id: str) -> str:
        """tool_use id → the job attempt that started it, for side-effecting calls (a hash): a job re-run
        after its worker died does not run such a call twice."""
        return self.names.session_key(session_id, "tool_runs")

    def retracted(self, session_id: str) -> str:
        """uuids of tombstoned messages (a tool_use of one never runs)."""
        return self.names.session_key(session_id, "retracted")

    def interrupt(self, session_id: str) -> str:
        return self.names.session_key(session_id, "interrupt")

    def request(self, session_id: str) -> str:
        """The latest API request of the session (JSON with its seq)."""
        return self.names.session_key(session_id, "request")

    def session_config(self, session_id: str) -> str:
        """The session's :class:`agentbus_redis.model.session_config.SessionModelConfig` (JSON; absent: defaults)."""
        return self.names.session_key(session_id, "config")

    def usage(self, session_id: str) -> str:
        """Hash of the session's accumulated model usage and cost (M10)."""
        return self.names.session_key(session_id, "usage")

    def model_lease(self, session_id: str) -> str:
        """Which model worker is calling the model for the session (at most one call in flight)."""
        return self.names.session_key(session_id, "model", "lease")

    def model_inflight(self, session_id: str) -> str:
        """The session's latest model call: its request id and seq, and whether its reply is complete (JSON; a
        worker that takes over a dead worker's request tombstones a half-streamed reply from it)."""
        return self.names.session_key(session_id, "model", "inflight")

    @property
    def tool_catalog(self) -> str:
        """Hash of the tools each live tool worker can run (field: worker id; value: its definitions)."""
        return self.names.stream("tools:catalog")

    def deadlines(self, shard: int) -> str:
        """Sorted set of the shard's sessions scored by their next tool deadline (epoch ms)."""
        return self.names.shard_stream(shard, "deadlines")

    def stuck_index(self, shard: int) -> str:
        """Sorted set of the shard's sessions that wait for something, scored by when the wait counts as stuck
        (epoch ms, bus/stuck_turns.py): what ingestion's stuck-turn sweep reads."""
        return self.names.shard_stream(shard, "waits")

    def sessions(self, shard: int) -> str:
        """Sorted set of the shard's known session ids (scored by last activity, epoch ms, refreshed at most
        once a minute)."""
        return self.names.shard_stream(shard, "sessions")

    def session_state_index(self, shard: int, state: str) -> str:
        """Sorted set of the shard's sessions in console state ``state`` (views/states.py), scored by when they
        entered it (epoch ms): a session is in exactly one of them, moved in ingestion's batch write."""
        return self.names.shard_stream(shard, f"sessions:{state}")

    def session_indexes(self) -> list[str]:
        return self.names.shard_streams("sessions")

    def lane_streams(self, group: str) -> list[str]:
        return self.names.shard_streams(LANE_OF_GROUP[group])


def _tool_jobs_name(pool: str) -> str:
    """``tools:jobs`` (the default pool) or ``tools:pool:NAME:jobs``: every pool's streams end in ``:jobs``."""
    return "tools:jobs" if pool == DEFAULT_POOL else f"tools:pool:{pool}:jobs"
