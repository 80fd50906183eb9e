"""``KeyCalls``: many single-key commands as one atomic script, optionally fenced by a token key."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from agentbus_redis.runtime.key_calls import Arg, Fenced, KeyCalls

pytestmark = pytest.mark.integration


def batch_write() -> KeyCalls:
    calls = KeyCalls()
    calls.add_xadd("kc:out", {"data": b"one"})
    calls.add_xadd("kc:trimmed", {"data": b"two"}, maxlen=1000)
    calls.add("SET", "kc:state", "v2")
    calls.add_members("SADD", "kc:set", ["a", "b", "c"])
    calls.add("INCR", "kc:counter")
    return calls


async def test_fenced_write_runs_every_call_while_the_token_holds(aredis: aioredis.Redis) -> None:
    await aredis.set("kc:epoch", "7")
    last = await batch_write().write_fenced(aredis, key="kc:epoch", token="7")
    assert last == 1  # the last call's reply (INCR)
    assert await aredis.xlen("kc:out") == 1
    assert await aredis.xlen("kc:trimmed") == 1
    assert await aredis.get("kc:state") == b"v2"
    assert await aredis.smembers("kc:set") == {b"a", b"b", b"c"}


async def test_fenced_write_runs_nothing_once_the_token_moved_on(aredis: aioredis.Redis) -> None:
    """A stale owner (epoch 7) after another took the shard (epoch 8): not one call applies."""
    await aredis.set("kc:epoch", "8")
    with pytest.raises(Fenced) as raised:
        await batch_write().write_fenced(aredis, key="kc:epoch", token="7")
    assert raised.value.key == "kc:epoch"
    assert "is 8, not 7" in str(raised.value)
    assert await aredis.exists("kc:out", "kc:trimmed", "kc:state", "kc:set", "kc:counter") == 0


async def test_fenced_write_refused_when_the_token_key_is_missing(aredis: aioredis.Redis) -> None:
    with pytest.raises(Fenced):
        await batch_write().write_fenced(aredis, key="kc:epoch", token="1")
    assert await aredis.exists("kc:out") == 0


async def test_failing_call_stops_the_script_and_is_raised(aredis: aioredis.Redis) -> None:
    await aredis.set("kc:counter", "not a number")
    with pytest.raises(ResponseError):
        await batch_write().write(aredis)
    assert await aredis.xlen("kc:out") == 1  # calls before the failing one stay applied (as in MULTI/EXEC)


async def test_read_returns_every_reply_in_order(aredis: aioredis.Redis) -> None:
    await aredis.sadd("kc:set", "a")
    reads = KeyCalls()
    reads.add("SMISMEMBER", "kc:set", "a", "z")
    reads.add("GET", "kc:missing")
    reads.add("SCARD", "kc:set")
    assert await reads.read(aredis) == [[1, 0], None, 1]


async def test_script_reloaded_after_script_flush(aredis: aioredis.Redis) -> None:
    """EVALSHA falls back to EVAL when Redis forgot the script (a restart, SCRIPT FLUSH)."""
    await aredis.script_flush()
    assert await batch_write().write(aredis) == 1


async def test_calls_naming_the_same_keys_apply_in_order(aredis: aioredis.Redis) -> None:
    """Each key is declared once (``KEYS``) however many calls name it: every call still applies to its own key,
    in the order queued, fenced or not, and a read answers each call's reply."""
    await aredis.set("kc:epoch", "3")
    calls = KeyCalls()
    calls.add("RPUSH", "kc:list", "1")
    calls.add("RPUSH", "kc:other", "x")
    calls.add_xadd("kc:out", {"n": 1})
    calls.add("RPUSH", "kc:list", "2")
    calls.add_keyless("PUBLISH", "kc:channel", "m")
    calls.add_xadd("kc:out", {"n": 2}, maxlen=10)
    calls.add("RPUSH", "kc:other", "y")
    calls.add_members("RPUSH", "kc:list", ["3", "4"])
    assert await calls.write_fenced(aredis, key="kc:epoch", token="3") == 4  # the last call's reply (RPUSH)
    assert await aredis.lrange("kc:list", 0, -1) == [b"1", b"2", b"3", b"4"]
    assert await aredis.lrange("kc:other", 0, -1) == [b"x", b"y"]
    written = await aredis.xrange("kc:out")
    assert written is not None
    assert [fields for _, fields in written] == [{b"n": b"1"}, {b"n": b"2"}]
    reads = KeyCalls()
    reads.add("LLEN", "kc:list")
    reads.add("LLEN", "kc:other")
    reads.add("LINDEX", "kc:list", 0)
    reads.add("XLEN", "kc:out")
    reads.add("LLEN", "kc:other")
    assert await reads.read(aredis) == [4, 2, b"1", 2, 2]


async def test_outputs_sharing_their_fields_write_them_to_each_stream(aredis: aioredis.Redis) -> None:
    """Consecutive outputs with the same fields mapping (ingestion's log entry, to the log and the events stream)
    carry the fields once; each stream still gets every field, after whatever the output names itself."""
    shared: dict[str, Arg] = {"data": b"payload", "n": 7}
    other: dict[str, Arg] = {"data": b"other"}
    calls = KeyCalls()
    calls.add_xadds(
        [
            ("kc:log", shared, None),
            ("kc:events", shared, 2),
            ("kc:third", shared, None),
            ("kc:log", other, None),
            ("kc:events", other, 2),
        ]
    )
    calls.add("SET", "kc:state", "done")
    assert [call[1] for call in calls._calls] == [1, -2, -3, 1, -2, 4]
    await calls.write(aredis)
    for stream, expected in [
        ("kc:log", [{b"data": b"payload", b"n": b"7"}, {b"data": b"other"}]),
        ("kc:events", [{b"data": b"payload", b"n": b"7"}, {b"data": b"other"}]),
        ("kc:third", [{b"data": b"payload", b"n": b"7"}]),
    ]:
        written = await aredis.xrange(stream)
        assert written is not None
        assert [fields for _, fields in written] == expected
    assert await aredis.get("kc:state") == b"done"
