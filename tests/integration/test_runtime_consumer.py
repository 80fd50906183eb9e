"""BatchConsumer against a real Redis: group creation, batching, acks, crash recovery, dead letters, stop.

Redis Streams semantics the runtime relies on are in redis-streams-baseline.md §4/§9 and ecosystem.md §4.3.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import pytest
import redis.asyncio as aioredis

from agentbus_redis.runtime import failure_counts
from agentbus_redis.runtime.consumer import BatchConsumer, BatchHandler, BatchOutcome, ConsumerConfig, Output, Poison
from agentbus_redis.runtime.key_calls import KeyCalls
from agentbus_redis.streams.deadletter import REASON_HANDLER_FAILED, REASON_MAX_DELIVERIES, list_dead_letters
from agentbus_redis.streams.entries import StreamEntry

pytestmark = pytest.mark.integration

STREAM = "agentbus:test:in"
OUT = "agentbus:test:out"
GROUP = "workers"
FAST = ConsumerConfig(
    count=100, block_ms=50, claim_min_idle_ms=100, claim_interval_s=0.05, backoff_initial_s=0.01, backoff_max_s=0.1
)
NO_CLAIM = ConsumerConfig(count=100, block_ms=50, claim_min_idle_ms=60_000, claim_interval_s=60.0)


async def wait_until(predicate: Callable[[], bool], *, timeout_s: float = 10.0) -> None:
    """Poll ``predicate`` (a safety timeout only; the tests assert on outcomes, not on time)."""
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.01)


async def fill(client: aioredis.Redis, n: int, stream: str = STREAM) -> list[str]:
    pipe = client.pipeline(transaction=False)
    for seq in range(n):
        pipe.xadd(stream, {"data": f'{{"seq": {seq}}}'})
    return [raw.decode() for raw in await pipe.execute()]


def forward(seen: list[StreamEntry]) -> BatchHandler:
    """A handler that records the batch and forwards every entry to OUT."""

    async def handle(batch: list[StreamEntry]) -> BatchOutcome:
        seen.extend(batch)
        return BatchOutcome(outputs=[Output(OUT, {"data": entry.fields["data"]}) for entry in batch])

    return handle


async def pending_count(client: aioredis.Redis, stream: str = STREAM) -> int:
    summary = await client.xpending(stream, GROUP)
    return int(summary["pending"])


async def test_entries_written_before_group_exists_are_consumed(aredis: aioredis.Redis) -> None:
    """The group is created at id 0 (not ``$``, faststream's default, baseline §9): nothing written before
    startup is missed."""
    ids = await fill(aredis, 5)
    seen: list[StreamEntry] = []
    consumer = BatchConsumer(aredis, stream=STREAM, group=GROUP, consumer="c1", handler=forward(seen), config=FAST)
    consumer.start()
    await wait_until(lambda: len(seen) == 5)
    await consumer.stop()
    assert [entry.entry_id for entry in seen] == ids
    assert [entry.json()["seq"] for entry in seen] == [0, 1, 2, 3, 4]
    assert await pending_count(aredis) == 0
    assert await aredis.xlen(OUT) == 5


async def test_batch_outputs_and_one_multi_id_xack_per_batch(aredis: aioredis.Redis) -> None:
    """Baseline §4 batched mode: one pipeline per read batch with all XADDs and one XACK for all ids."""
    await fill(aredis, 250)
    await aredis.config_resetstat()
    seen: list[StreamEntry] = []
    consumer = BatchConsumer(aredis, stream=STREAM, group=GROUP, consumer="c1", handler=forward(seen), config=FAST)
    consumer.start()
    await wait_until(lambda: consumer.stats.acked == 250)
    await consumer.stop()
    stats = await aredis.info("commandstats")
    assert consumer.stats.batches == 3  # 100 + 100 + 50
    assert stats["cmdstat_xack"]["calls"] == 3
    assert stats["cmdstat_xadd"]["calls"] == 250
    assert consumer.stats.consumed == consumer.stats.produced == 250
    assert await aredis.xlen(OUT) == 250
    assert await pending_count(aredis) == 0


async def test_crashed_consumer_entries_reclaimed_by_another(aredis: aioredis.Redis) -> None:
    """A consumer killed with a batch in hand (no ack): a peer takes the entries over with XAUTOCLAIM."""
    await fill(aredis, 10)
    in_hand = asyncio.Event()

    async def hang(batch: list[StreamEntry]) -> BatchOutcome:
        in_hand.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    crashed = BatchConsumer(aredis, stream=STREAM, group=GROUP, consumer="dead", handler=hang, config=FAST)
    task = crashed.start()
    await in_hand.wait()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert await pending_count(aredis) == 10

    seen: list[StreamEntry] = []
    peer = BatchConsumer(aredis, stream=STREAM, group=GROUP, consumer="peer", handler=forward(seen), config=FAST)
    peer.start()
    await wait_until(lambda: len(seen) == 10)
    await peer.stop()
    assert peer.stats.reclaimed == 10
    assert peer.stats.redelivered == 10
    assert {entry.delivery_count for entry in seen} == {2}
    assert await pending_count(aredis) == 0


async def test_restarted_consumer_drains_its_own_pending_list_first(aredis: aioredis.Redis) -> None:
    """A consumer restarted under the same name re-processes what it had in hand at once (read at id 0),
    without waiting for the reclaim idle time."""
    await fill(aredis, 3)
    await aredis.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    assert await aredis.xreadgroup(GROUP, "c1", {STREAM: ">"}, count=10)  # in hand, then the process dies
    seen: list[StreamEntry] = []
    consumer = BatchConsumer(aredis, stream=STREAM, group=GROUP, consumer="c1", handler=forward(seen), config=NO_CLAIM)
    consumer.start()
    await wait_until(lambda: len(seen) == 3)
    await consumer.stop()
    assert [entry.delivery_count for entry in seen] == [2, 2, 2]
    assert consumer.stats.reclaimed == 0
    assert await pending_count(aredis) == 0


async def test_max_deliveries_moves_entry_to_dead_letter_stream_with_history(aredis: aioredis.Redis) -> None:
    """An entry delivered more than max_deliveries times is dead-lettered with stream, id, fields, count,
    consumer and reason, and acked."""
    (entry_id,) = await fill(aredis, 1)
    attempts: list[int] = []

    async def always_fail(batch: list[StreamEntry]) -> BatchOutcome:
        attempts.extend(entry.delivery_count for entry in batch)
        raise RuntimeError("downstream refuses")

    config = ConsumerConfig(block_ms=20, claim_min_idle_ms=20, claim_interval_s=0.02, max_deliveries=2)
    consumer = BatchConsumer(aredis, stream=STREAM, group=GROUP, consumer="c1", handler=always_fail, config=config)
    consumer.start()
    await wait_until(lambda: consumer.stats.dead_lettered == 1)
    await consumer.stop()
    assert attempts == [1, 2]
    assert await pending_count(aredis) == 0
    (letter,) = await list_dead_letters(aredis, STREAM + ":dlq")
    assert letter.stream == STREAM
    assert letter.entry_id == entry_id
    assert letter.group == GROUP
    assert letter.consumer == "c1"
    assert letter.delivery_count == 3
    assert letter.reason == REASON_MAX_DELIVERIES
    assert letter.fields == {"data": b'{"seq": 0}'}


async def test_handler_exception_leaves_entries_pending(aredis: aioredis.Redis) -> None:
    """A failing batch is neither acked nor lost: its entries stay in the pending list for redelivery."""
    await fill(aredis, 4)

    async def fail(batch: list[StreamEntry]) -> BatchOutcome:
        raise RuntimeError("boom")

    consumer = BatchConsumer(aredis, stream=STREAM, group=GROUP, consumer="c1", handler=fail, config=NO_CLAIM)
    consumer.start()
    # One failure for the batch, then one per entry when retried one by one.
    await wait_until(lambda: consumer.stats.handler_errors == 5)
    await consumer.stop()
    assert consumer.stats.acked == 0
    assert await pending_count(aredis) == 4
    assert await aredis.xlen(OUT) == 0


async def test_failing_write_callback_leaves_entries_pending(aredis: aioredis.Redis) -> None:
    """A handler's pipeline callback that raises is a handler failure: nothing is written or acked, and the
    consumer keeps running."""
    await fill(aredis, 2)
    calls: list[int] = []

    def broken_write(pipe: object) -> None:
        calls.append(1)
        raise KeyError("state not loaded")

    async def handle(batch: list[StreamEntry]) -> BatchOutcome:
        return BatchOutcome(outputs=[Output(OUT, {"x": 1})], write=broken_write)

    consumer = BatchConsumer(aredis, stream=STREAM, group=GROUP, consumer="c1", handler=handle, config=NO_CLAIM)
    consumer.start()
    await wait_until(lambda: consumer.stats.handler_errors == 1)
    await aredis.xadd(STREAM, {"data": b"{}"})
    await wait_until(lambda: consumer.stats.handler_errors == 2)  # still reading after the failure
    await consumer.stop()
    assert await pending_count(aredis) == 3
    assert await aredis.xlen(OUT) == 0
    assert consumer.stats.acked == 0


async def test_one_failing_entry_does_not_sink_its_batch(aredis: aioredis.Redis) -> None:
    """After a batch fails, entries are retried one by one: the good ones are settled, the bad one stays."""
    await fill(aredis, 3)
    await aredis.xadd(STREAM, {"data": b"not json"})
    seen: list[StreamEntry] = []

    async def strict(batch: list[StreamEntry]) -> BatchOutcome:
        values = [entry.json() for entry in batch]  # raises EntryDecodeError on the bad one
        seen.extend(batch)
        return BatchOutcome(outputs=[Output(OUT, {"seq": value["seq"]}) for value in values])

    consumer = BatchConsumer(aredis, stream=STREAM, group=GROUP, consumer="c1", handler=strict, config=NO_CLAIM)
    consumer.start()
    await wait_until(lambda: consumer.stats.acked == 3 and consumer.stats.handler_errors == 2)
    await consumer.stop()
    assert len(seen) == 3
    assert await pending_count(aredis) == 1


async def test_handler_marks_single_entry_poison(aredis: aioredis.Redis) -> None:
    """The handler dead-letters one entry with its own reason; the others are acked normally."""
    ids = await fill(aredis, 3)

    async def reject_middle(batch: list[StreamEntry]) -> BatchOutcome:
        return BatchOutcome(poison={ids[1]: Poison("invariant_violation", "seq 1 is cursed")})

    consumer = BatchConsumer(aredis, stream=STREAM, group=GROUP, consumer="c1", handler=reject_middle, config=FAST)
    consumer.start()
    await wait_until(lambda: consumer.stats.acked == 3)
    await consumer.stop()
    (letter,) = await list_dead_letters(aredis, STREAM + ":dlq")
    assert (letter.entry_id, letter.reason, letter.detail) == (ids[1], "invariant_violation", "seq 1 is cursed")
    assert consumer.stats.dead_lettered == 1
    assert await pending_count(aredis) == 0


async def test_stop_finishes_and_acks_the_batch_in_hand(aredis: aioredis.Redis) -> None:
    """Graceful stop (SIGTERM path, ecosystem §4.3): the batch being handled is completed and acked."""
    await fill(aredis, 7)
    in_hand = asyncio.Event()
    release = asyncio.Event()

    async def slow(batch: list[StreamEntry]) -> BatchOutcome:
        in_hand.set()
        await release.wait()
        return BatchOutcome(outputs=[Output(OUT, {"data": entry.fields["data"]}) for entry in batch])

    consumer = BatchConsumer(aredis, stream=STREAM, group=GROUP, consumer="c1", handler=slow, config=FAST)
    consumer.start()
    await in_hand.wait()
    stopping = asyncio.create_task(consumer.stop())
    await asyncio.sleep(0)
    assert not stopping.done()
    release.set()
    await stopping
    assert not consumer.running
    assert consumer.stats.acked == 7
    assert await aredis.xlen(OUT) == 7
    assert await pending_count(aredis) == 0


async def test_ordered_consumer_keeps_stream_order_across_a_failure(aredis: aioredis.Redis) -> None:
    """Ordered lanes: a failing entry blocks the later ones until it succeeds (no overtaking)."""
    await fill(aredis, 5)
    handled: list[int] = []
    failures = {2: 2}  # seq 2 fails twice

    async def flaky(batch: list[StreamEntry]) -> BatchOutcome:
        for entry in batch:
            seq = entry.json()["seq"]
            if failures.get(seq, 0) > 0:
                failures[seq] -= 1
                raise RuntimeError(f"seq {seq} not yet")
        handled.extend(entry.json()["seq"] for entry in batch)
        return BatchOutcome()

    config = ConsumerConfig(block_ms=20, ordered=True, backoff_initial_s=0.01, backoff_max_s=0.05)
    consumer = BatchConsumer(aredis, stream=STREAM, group=GROUP, consumer="lane", handler=flaky, config=config)
    consumer.start()
    await wait_until(lambda: consumer.stats.acked == 5)
    await consumer.stop()
    # seq 0 and 1 succeed alone during the one-by-one retry; everything after 2 waits for it.
    assert handled == [0, 1, 2, 3, 4]
    assert await pending_count(aredis) == 0


async def test_heartbeat_advances_while_idle(aredis: aioredis.Redis) -> None:
    """Liveness (ecosystem §4.3): the loop's heartbeat moves on while it waits for entries."""
    seen: list[StreamEntry] = []
    consumer = BatchConsumer(aredis, stream=STREAM, group=GROUP, consumer="c1", handler=forward(seen), config=FAST)
    before = consumer.last_progress_monotonic
    consumer.start()
    await wait_until(lambda: consumer.last_progress_monotonic > before and consumer.stats.connected)
    await consumer.stop()


ORDERED = ConsumerConfig(
    block_ms=20, ordered=True, max_deliveries=2, backoff_initial_s=0.01, backoff_max_s=0.05, claim_all_on_start=True
)


async def deliver_elsewhere(client: aioredis.Redis, entry_id: str, times: int) -> None:
    """Bump ``entry_id``'s delivery count as lease bounces do: each takeover claims it for another consumer."""
    await client.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    await client.xreadgroup(GROUP, "owner-0", {STREAM: ">"}, count=1)
    for bounce in range(1, times):
        await client.xclaim(STREAM, GROUP, f"owner-{bounce}", 0, [entry_id])


async def run_lane(
    client: aioredis.Redis, handler: BatchHandler, done: Callable[[BatchConsumer], bool]
) -> BatchConsumer:
    """Run an ordered lane consumer until ``done`` (a safety timeout only)."""
    consumer = BatchConsumer(client, stream=STREAM, group=GROUP, consumer="lane", handler=handler, config=ORDERED)
    consumer.start()
    await wait_until(lambda: done(consumer))
    await consumer.stop()
    return consumer


async def test_ordered_lane_takeovers_are_not_failures(aredis: aioredis.Redis) -> None:
    """failure_counts.py: an entry claimed by one owner after another (delivered 6 times, over
    max_deliveries=2) but never failing is handled, not dead-lettered."""
    (entry_id,) = await fill(aredis, 1)
    await deliver_elsewhere(aredis, entry_id, 6)
    seen: list[StreamEntry] = []
    consumer = await run_lane(aredis, forward(seen), lambda lane: lane.stats.acked == 1)
    assert [entry.delivery_count for entry in seen] == [7]
    assert consumer.stats.dead_lettered == 0


async def test_ordered_lane_dead_letters_a_crash_loop_by_its_deliveries(aredis: aioredis.Redis) -> None:
    """An entry delivered more than 4 × max_deliveries times with no failure recorded (its handler took the
    process down each time) is dead-lettered, never handled."""
    (entry_id,) = await fill(aredis, 1)
    await deliver_elsewhere(aredis, entry_id, 8)
    seen: list[StreamEntry] = []
    await run_lane(aredis, forward(seen), lambda lane: lane.stats.dead_lettered == 1)
    assert seen == []
    (letter,) = await list_dead_letters(aredis, STREAM + ":dlq")
    assert (letter.entry_id, letter.reason, letter.delivery_count) == (entry_id, REASON_MAX_DELIVERIES, 9)
    assert "crash loop" in letter.detail


async def test_ordered_lane_dead_letters_after_max_deliveries_failures(aredis: aioredis.Redis) -> None:
    """Handler failures are what count on an ordered lane: after max_deliveries of them the entry is
    dead-lettered with the handler's last exception (issue 15), and its failure record goes with it."""
    (entry_id,) = await fill(aredis, 1)
    attempts: list[int] = []

    async def always_fail(batch: list[StreamEntry]) -> BatchOutcome:
        attempts.extend(entry.delivery_count for entry in batch)
        raise RuntimeError("downstream refuses")

    await run_lane(aredis, always_fail, lambda lane: lane.stats.dead_lettered == 1)
    assert len(attempts) == 2
    (letter,) = await list_dead_letters(aredis, STREAM + ":dlq")
    assert (letter.entry_id, letter.reason) == (entry_id, REASON_HANDLER_FAILED)
    assert letter.detail == "RuntimeError: downstream refuses (failed 2 times, delivered 3 times)"
    assert await aredis.exists(STREAM + ":failures") == 0
    assert await pending_count(aredis) == 0


async def test_ordered_lane_forgets_the_failures_of_an_entry_that_succeeds(aredis: aioredis.Redis) -> None:
    await fill(aredis, 1)
    failures_left = [1]

    async def flaky(batch: list[StreamEntry]) -> BatchOutcome:
        if failures_left[0]:
            failures_left[0] -= 1
            raise RuntimeError("not yet")
        return BatchOutcome()

    consumer = await run_lane(aredis, flaky, lambda lane: lane.stats.acked == 1)
    assert consumer.stats.dead_lettered == 0
    assert await aredis.exists(STREAM + ":failures") == 0


async def test_groups_reading_one_stream_keep_their_own_failure_counts(aredis: aioredis.Redis) -> None:
    """failure_counts.py: normalization and transcripts both read the log; one group's failures of an entry
    do not count against the other, and one group acking it does not erase the other's record."""
    entry_id = "1-1"
    calls = KeyCalls()
    failure_counts.queue_failures(calls, STREAM, "normalization", [entry_id])
    failure_counts.queue_failures(calls, STREAM, "normalization", [entry_id])
    failure_counts.queue_failures(calls, STREAM, "transcripts", [entry_id])
    await calls.write(aredis)
    assert await failure_counts.read_failures(aredis, STREAM, "normalization", [entry_id]) == {entry_id: 2}
    assert await failure_counts.read_failures(aredis, STREAM, "transcripts", [entry_id]) == {entry_id: 1}
    forget = KeyCalls()
    failure_counts.queue_forget(forget, STREAM, "transcripts", [entry_id])
    await forget.write(aredis)
    assert await failure_counts.read_failures(aredis, STREAM, "transcripts", [entry_id]) == {}
    assert await failure_counts.read_failures(aredis, STREAM, "normalization", [entry_id]) == {entry_id: 2}
