"""The transcript worker process: ``agentbus worker transcripts``."""

from __future__ import annotations

from agentbus_redis.observability.metrics import instrument_handler
from agentbus_redis.runtime.consumer import BatchConsumer
from agentbus_redis.runtime.lane_worker import LaneWorker
from agentbus_redis.streams.topology import TRANSCRIPTS_GROUP
from agentbus_redis.subagents.store import AgentStore
from agentbus_redis.subagents.transcript_meta import SubagentMetaWriter
from agentbus_redis.transcript_files.lines import SessionStamp
from agentbus_redis.transcript_files.pi_mirror import PiMirror
from agentbus_redis.transcript_files.store import StoreConfig, TranscriptStore
from agentbus_redis.workers.process import WorkerContext
from agentbus_redis.workers.transcripts.worker import TranscriptWorker


class TranscriptRuntime:
    """Owns log shards for the transcripts group."""

    def __init__(self, context: WorkerContext) -> None:
        settings = context.settings
        self.store = TranscriptStore(
            settings.data_dir,
            StoreConfig(
                # Bus sessions have no working tree: no git lookup per batch (it was ~12% of the worker).
                stamp=SessionStamp(entrypoint="agentbus", git_branch=None),
                min_sync_interval_s=settings.fsync_interval_ms / 1000,
                sync=settings.transcript_sync,
            ),
        )
        self.pi_mirror = PiMirror() if settings.transcript_format == "pi" else None
        self.worker = TranscriptWorker(
            self.store,
            cwd=settings.session_cwd,
            pi_mirror=self.pi_mirror,
            on_new_session=SubagentMetaWriter(
                AgentStore(context.redis, context.topology), self.store, cwd=settings.session_cwd
            ),
        )
        self.lanes = LaneWorker(
            context.redis,
            settings.names,
            group=TRANSCRIPTS_GROUP,
            stream_name="log",
            owner=context.owner,
            handler_factory=lambda shard, epoch: instrument_handler(
                "transcripts", self.worker.handler_for(shard, epoch)
            ),
            consumer_config=context.consumer_config(),
            lease_config=context.lease_config(),
            on_release=self._forget_shard,
        )
        self._names = settings.names

    async def start(self) -> None:
        await self.lanes.start()

    async def stop(self) -> None:
        await self.lanes.stop()
        await self.store.close()

    async def _forget_shard(self, shard: int) -> None:
        """The shard's next owner appends to its sessions' files: what this store cached of them (de-dup
        uuids, chain tail) goes stale, so it is dropped and re-read if the shard comes back."""
        sessions = [s for s in self.store.cached_sessions() if self._names.shard_of(s) == shard]
        await self.store.forget(sessions)
        if self.pi_mirror is not None:
            self.pi_mirror.forget(sessions)

    def consumers(self) -> list[BatchConsumer]:
        return self.lanes.consumers()

    def groups(self) -> list[tuple[str, str]]:
        return [(stream, TRANSCRIPTS_GROUP) for stream in self.lanes.streams]


def create(context: WorkerContext) -> TranscriptRuntime:
    return TranscriptRuntime(context)


def __getattr__(attribute: str) -> object:
    """``faststream run agentbus_redis.workers.transcripts.app:app``: the ASGI app, built from the environment on first
    use."""
    if attribute == "app":
        from agentbus_redis.workers.process import build_app

        return build_app("transcripts", create)[0]
    raise AttributeError(attribute)
