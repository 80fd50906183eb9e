"""Ordered lanes (ecosystem.md §5.3 points 2–3): with several worker instances, each shard stream has one
reader (its lease owner), so every session's events are handled in stream order, across a graceful
hand-over and across the crash of an owner."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import replace

import pytest
import redis.asyncio as aioredis

from agentbus_redis.runtime.consumer import BatchConsumer, BatchHandler, BatchOutcome, ConsumerConfig, Fence, Output
from agentbus_redis.runtime.lanes import ShardLanes
from agentbus_redis.runtime.leases import LeaseConfig, ShardLeases
from agentbus_redis.streams.entries import StreamEntry
from agentbus_redis.streams.names import StreamNames

pytestmark = pytest.mark.integration

NAMES = StreamNames(prefix="agentbus:", shards=4)
LANE = "normalize"
EVENTS = "session_events"
OUT = "agentbus:lanes-test:out"
SESSIONS = [f"session-{i}" for i in range(8)]

Record = tuple[str, int, int, str]  # session, seq, epoch, worker


async def wait_until(predicate: Callable[[], bool], *, timeout_s: float = 15.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.01)


async def produce(client: aioredis.Redis, seqs: range, sessions: list[str] = SESSIONS) -> None:
    pipe = client.pipeline(transaction=False)
    for seq in seqs:
        for session in sessions:
            pipe.xadd(NAMES.session_stream(session, EVENTS), {"session": session, "seq": seq})
    await pipe.execute()


class Worker:
    """One worker instance: leases for the lane plus one ordered consumer per owned shard."""

    def __init__(self, client: aioredis.Redis, name: str, records: list[Record], ttl_ms: int) -> None:
        self.name = name
        self.records = records
        self.hang = asyncio.Event()
        self.in_hand = asyncio.Event()
        self.resume = asyncio.Event()
        self.lanes = ShardLanes(
            client,
            NAMES,
            stream_name=EVENTS,
            group=LANE,
            consumer=name,
            handler_factory=self.handler,
            config=ConsumerConfig(count=20, block_ms=20),
            lease_valid=lambda shard: self.leases.holds(shard),
        )
        config = LeaseConfig(ttl_ms=ttl_ms, renew_interval_ms=50)
        self.leases = ShardLeases(client, NAMES, lane=LANE, owner=name, listener=self.lanes, config=config)
        self.task = asyncio.create_task(self.leases.run())

    def handler(self, shard: int, epoch: int) -> BatchHandler:
        async def handle(batch: list[StreamEntry]) -> BatchOutcome:
            if self.hang.is_set():
                self.in_hand.set()
                await self.resume.wait()
            await asyncio.sleep(0.001)
            for entry in batch:
                self.records.append((entry.fields["session"].decode(), int(entry.fields["seq"]), epoch, self.name))
            # What the batch writes downstream: only a current owner's outputs may land.
            return BatchOutcome(outputs=[Output(OUT, {**entry.fields, "worker": self.name}) for entry in batch])

        return handle

    async def stop(self) -> None:
        await self.leases.stop()
        await self.task

    async def crash(self) -> None:
        """Die without releasing anything: leases expire, batches in hand stay pending."""
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        for consumer in list(self.lanes.consumers.values()):
            await consumer.stop(timeout_s=0)


async def settled(*workers: Worker) -> None:
    """Wait until the workers split the shards between them (so each one reads some sessions)."""

    def split() -> bool:
        for worker in workers:
            if worker.task.done():
                worker.task.result()  # surface a crashed lease loop instead of waiting for the timeout
        owned = [set(worker.leases.owned) for worker in workers]
        return all(owned) and sum(map(len, owned)) == NAMES.shards == len(set().union(*owned))

    try:
        await wait_until(split)
    except TimeoutError:
        state = {w.name: (sorted(w.leases.owned), w.leases.members, w.leases.conflicts) for w in workers}
        raise AssertionError(f"shards never split between the workers: {state}") from None


def assert_in_order(records: list[Record], seqs: range) -> None:
    """Per session, seqs are handled in stream order and none is missing (repeats allowed: at-least-once)."""
    for session in SESSIONS:
        handled = [seq for name, seq, _, _ in records if name == session]
        assert handled == sorted(handled), f"{session} out of order: {handled}"
        assert set(handled) == set(seqs)


async def test_sessions_stay_in_order_across_graceful_hand_over(aredis: aioredis.Redis) -> None:
    records: list[Record] = []
    a = Worker(aredis, "worker-a", records, ttl_ms=2000)
    b = Worker(aredis, "worker-b", records, ttl_ms=2000)
    await settled(a, b)
    await produce(aredis, range(30))
    await wait_until(lambda: len(records) >= 30 * len(SESSIONS))
    assert {worker for *_, worker in records} == {"worker-a", "worker-b"}
    await a.stop()
    await produce(aredis, range(30, 60))
    await wait_until(lambda: len({(s, q) for s, q, _, _ in records}) == 60 * len(SESSIONS))
    await b.stop()
    assert_in_order(records, range(60))
    assert len(records) == 60 * len(SESSIONS)  # graceful: nothing handled twice
    assert {worker for _, seq, _, worker in records if seq >= 30} == {"worker-b"}


async def test_sessions_stay_in_order_when_an_owner_crashes(aredis: aioredis.Redis) -> None:
    records: list[Record] = []
    a = Worker(aredis, "worker-a", records, ttl_ms=300)
    b = Worker(aredis, "worker-b", records, ttl_ms=300)
    await settled(a, b)
    a_shards = set(a.leases.owned)
    await produce(aredis, range(20))
    await wait_until(lambda: len(records) >= 20 * len(SESSIONS))
    a.hang.set()
    await produce(aredis, range(20, 40))
    await a.in_hand.wait()  # worker-a holds a batch it will never finish
    await a.crash()
    await wait_until(lambda: len({(s, q) for s, q, _, _ in records}) == 40 * len(SESSIONS))
    await b.stop()
    assert_in_order(records, range(40))
    # worker-b took worker-a's shards over, with a higher epoch (fencing token) than worker-a had.
    for shard in a_shards:
        on_shard = [(epoch, worker) for session, _, epoch, worker in records if NAMES.shard_of(session) == shard]
        a_epochs = {epoch for epoch, worker in on_shard if worker == "worker-a"}
        b_epochs = {epoch for epoch, worker in on_shard if worker == "worker-b"}
        assert b_epochs
        assert min(b_epochs) > max(a_epochs, default=0)


async def test_owner_paused_past_its_lease_is_fenced_out(aredis: aioredis.Redis) -> None:
    """Fencing token (ecosystem.md §5.3 point 3): an owner that stalls mid-batch past its lease (GC pause,
    CPU starvation, SIGSTOP) and wakes after another worker took its shards over writes nothing and acks
    nothing — the new owner's epoch is in the shard's epoch key, so the stale batch's script is refused —
    and its idle consumers read nothing once their lease may have lapsed (``ShardLeases.holds``)."""
    records: list[Record] = []
    a = Worker(aredis, "worker-a", records, ttl_ms=300)
    await wait_until(lambda: len(a.leases.owned) == NAMES.shards)
    await produce(aredis, range(5))
    await wait_until(lambda: len(records) == 5 * len(SESSIONS))
    stalled = [session for session in SESSIONS if NAMES.shard_of(session) == NAMES.shard_of(SESSIONS[0])]
    a.hang.set()
    await produce(aredis, range(5, 10), stalled)
    await a.in_hand.wait()  # one consumer holds a batch; the other shards' consumers are idle
    a.task.cancel()  # the pause: worker-a's lease loop stops renewing, its consumers stay alive
    with contextlib.suppress(asyncio.CancelledError):
        await a.task
    b = Worker(aredis, "worker-b", records, ttl_ms=300)
    await wait_until(lambda: len(b.leases.owned) == NAMES.shards)
    await wait_until(
        lambda: {(s, q) for s, q, _, w in records if w == "worker-b"} >= {(s, q) for s in stalled for q in range(5, 10)}
    )
    await produce(aredis, range(10, 15))  # worker-a's idle consumers are still running
    await wait_until(
        lambda: {(s, q) for s, q, _, w in records if q >= 10} == {(s, q) for s in SESSIONS for q in range(10, 15)}
    )
    stalled_consumer = a.lanes.consumers[NAMES.shard_of(SESSIONS[0])]
    a.resume.set()  # worker-a wakes up and finishes the batch it held
    # Its settle script is refused. (An idle consumer whose blocked read was answered after the takeover is
    # fenced out too, on the read's script, when the machine is slow enough that its read went out while its
    # lease still held: that is the same refusal, so only the stalled one is counted.)
    await wait_until(lambda: stalled_consumer.stats.fenced == 1)
    await b.stop()
    for consumer in a.lanes.consumers.values():
        await consumer.stop(timeout_s=1)

    written = [(fields[b"worker"].decode(), int(fields[b"seq"])) for _, fields in await aredis.xrange(OUT)]
    assert {seq for worker, seq in written if worker == "worker-a"} == set(range(5))
    expected_b = [*(q for q in range(5, 10) for _ in stalled), *(q for q in range(10, 15) for _ in SESSIONS)]
    assert sorted(seq for worker, seq in written if worker == "worker-b") == sorted(expected_b)
    assert {worker for _, seq, _, worker in records if seq >= 10} == {"worker-b"}
    for shard in range(NAMES.shards):
        assert int((await aredis.xpending(NAMES.shard_stream(shard, EVENTS), LANE))["pending"]) == 0


async def test_a_read_served_after_the_lease_moved_on_takes_nothing(aredis: aioredis.Redis) -> None:
    """Fenced reads (``fenced_reads.py``, ecosystem.md §5.3 point 3): a stale owner whose wait for new entries
    was sent while its lease held, and is answered after another worker took the shard over, takes none of
    them — before, a blocked ``XREADGROUP`` handed it the shard's next entry, its write was refused, and the
    entry sat in its pending list while the new owner applied the later ones (a session out of order)."""
    stream = NAMES.shard_stream(0, "fenced-reads")
    epoch_key = NAMES.lease_epoch_key(LANE, 0)
    await aredis.set(epoch_key, "1")
    handled: dict[str, list[int]] = {"stale": [], "owner": []}

    def consumer(name: str, epoch: str) -> BatchConsumer:
        async def handle(batch: list[StreamEntry]) -> BatchOutcome:
            handled[name].extend(int(entry.fields["n"]) for entry in batch)
            return BatchOutcome(outputs=[Output(OUT, entry.fields) for entry in batch])

        config = ConsumerConfig(count=10, block_ms=2000, ordered=True, claim_all_on_start=True)
        return BatchConsumer(
            aredis,
            stream=stream,
            group=LANE,
            consumer=name,
            handler=handle,
            config=replace(config, fence=Fence(epoch_key, epoch)),
        )

    stale = consumer("stale", "1")
    await stale.ensure_group()
    stale.start()
    await asyncio.sleep(0.3)  # its (long) wait for new entries is in flight...
    await aredis.set(epoch_key, "2")  # ...when another worker takes the shard over
    owner = consumer("owner", "2")
    owner.start()
    await asyncio.sleep(0.2)
    for n in range(5):
        await aredis.xadd(stream, {"n": n})
        await asyncio.sleep(0.02)
    await wait_until(lambda: handled["owner"] == list(range(5)))
    await wait_until(lambda: not stale.running)
    await owner.stop(timeout_s=5)
    assert handled["stale"] == []
    assert stale.stats.fenced == 1
    assert int((await aredis.xpending(stream, LANE))["pending"]) == 0
    assert [int(fields[b"n"]) for _, fields in await aredis.xrange(OUT)] == list(range(5))
