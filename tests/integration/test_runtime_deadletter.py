"""Dead-letter streams: the stored history round-trips losslessly; list/show/replay/purge."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis

from agentbus_redis.streams.deadletter import (
    DeadLetter,
    DeadLetterDecodeError,
    dead_letter_streams,
    list_dead_letters,
    purge_dead_letters,
    replay_dead_letter,
    show_dead_letter,
)
from agentbus_redis.streams.entries import StreamEntry, id_text
from agentbus_redis.streams.names import StreamNames

pytestmark = pytest.mark.integration

NAMES = StreamNames(prefix="agentbus:", shards=4)
STREAM = NAMES.shard_stream(2, "session_events")
DLQ = NAMES.dead_letter_stream(STREAM)


def letter(entry_id: str, fields: dict[str, bytes]) -> DeadLetter:
    entry = StreamEntry(STREAM, entry_id, fields, delivery_count=6)
    return DeadLetter.of_entry(entry, group="normalize", consumer="w1", reason="max_deliveries", at_ms=1_700_000)


async def store(client: aioredis.Redis, *letters: DeadLetter) -> list[str]:
    pipe = client.pipeline(transaction=False)
    for item in letters:
        pipe.xadd(DLQ, item.to_stream_fields())  # type: ignore[arg-type]  # bytes keys are valid fields
    return [raw.decode() for raw in await pipe.execute()]


async def test_dead_letter_round_trips_binary_fields_and_history(aredis: aioredis.Redis) -> None:
    """Original field values are stored byte for byte next to the history (stream, id, count, consumer)."""
    original = letter("1-0", {"data": b'{"a": 1}', "blob": b"\xff\x00\xfe", "f:x": b"prefixed name"})
    (dlq_id,) = await store(aredis, original)
    shown = await show_dead_letter(aredis, DLQ, dlq_id)
    assert shown is not None
    assert shown == original.model_copy(update={"dlq_id": dlq_id})
    assert DeadLetter.model_validate_json(shown.model_dump_json()) == shown
    assert shown.text_fields()["blob"] == "\\xff\x00\\xfe"  # NUL is valid UTF-8
    assert await show_dead_letter(aredis, DLQ, "9-9") is None


async def test_replay_writes_original_fields_back_and_removes_the_dead_letter(aredis: aioredis.Redis) -> None:
    ids = await store(aredis, letter("1-0", {"data": b"one"}), letter("2-0", {"data": b"two", "k": b"\x80"}))
    new_id = await replay_dead_letter(aredis, DLQ, ids[1])
    assert new_id is not None
    replayed: Any = await aredis.xrange(STREAM)
    ((replayed_id, fields),) = replayed
    assert id_text(replayed_id) == new_id
    assert fields == {b"data": b"two", b"k": b"\x80"}
    assert [item.entry_id for item in await list_dead_letters(aredis, DLQ)] == ["1-0"]
    assert await replay_dead_letter(aredis, DLQ, ids[1]) is None


async def test_purge_and_discover_dead_letter_streams(aredis: aioredis.Redis) -> None:
    ids = await store(aredis, letter("1-0", {"d": b"1"}), letter("2-0", {"d": b"2"}), letter("3-0", {"d": b"3"}))
    assert await dead_letter_streams(aredis, NAMES) == [DLQ]
    assert await purge_dead_letters(aredis, DLQ, [ids[0]]) == 1
    assert await purge_dead_letters(aredis, DLQ) == 2
    assert await dead_letter_streams(aredis, NAMES) == []


async def test_malformed_dead_letter_is_reported_with_its_id(aredis: aioredis.Redis) -> None:
    dlq_id = id_text(await aredis.xadd(DLQ, {"type": "dead_letter", "stream": STREAM}))
    with pytest.raises(DeadLetterDecodeError, match=dlq_id):
        await list_dead_letters(aredis, DLQ)
