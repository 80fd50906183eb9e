"""The transcript worker process: ``agentbus worker transcripts``."""

from __future__ import annotations

from services.agents.store import AgentStore
from services.agents.transcript_meta import SubagentMetaWriter
from services.observability.metrics import instrument_handler
from services.runtime.consumer import BatchConsumer
from services.runtime.lane_worker import LaneWorker
from services.runtime.topology import TRANSCRIPTS_GROUP
from services.runtime.worker_app import WorkerContext
from services.transcripts.lines import SessionStamp
from services.transcripts.pi_mirror import PiMirror
from services.transcripts.store import StoreConfig, TranscriptStore
from services.transcripts.worker import TranscriptWorker


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
    """``faststream run services.transcripts.app:app``: the ASGI app, built from the environment on first use."""
    if attribute == "app":
        from services.workers import build_worker

        return build_worker("transcripts")[0]
    raise AttributeError(attribute)
