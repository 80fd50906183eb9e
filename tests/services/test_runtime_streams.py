"""Stream and key naming (ecosystem.md §5.3 point 2): configured prefix, stable shard hash, hash tags."""

from __future__ import annotations

import zlib
from collections import Counter

import pytest
from redis.crc import key_slot

from agentbus_redis.runtime.leases import assign_shards, preferred_owner
from agentbus_redis.streams.names import (
    CLUSTER_SLOTS,
    StreamNames,
    dead_letter_stream,
    shard_of,
    shard_slot_window,
    shard_tag,
)


def hash_tag(key: str) -> str:
    """The part of ``key`` Redis Cluster hashes (the first non-empty ``{...}``)."""
    start = key.index("{")
    return key[start + 1 : key.index("}", start)]


def test_shard_of_is_crc32_mod_shards_and_stable() -> None:
    assert shard_of("abc", 16) == zlib.crc32(b"abc") % 16 == 891568578 % 16
    assert {shard_of(f"s{i}", 16) for i in range(500)} == set(range(16))
    with pytest.raises(ValueError, match="shards"):
        shard_of("abc", 0)


def test_shard_stream_and_session_keys_share_the_hash_tag() -> None:
    names = StreamNames(prefix="ab:", shards=16)
    session = "0b1c6f0e-session"
    shard = names.shard_of(session)
    stream = names.session_stream(session, "session_events")
    assert stream == f"ab:{shard_tag(shard, 16)}:session_events"
    keys = [
        names.session_key(session, "seq"),
        names.lease_key("normalize", shard),
        names.lease_epoch_key("normalize", shard),
        dead_letter_stream(stream),
    ]
    assert {hash_tag(key) for key in [stream, *keys]} == {shard_tag(shard, 16)[1:-1]}
    assert names.session_key(session, "seq") == f"ab:{shard_tag(shard, 16)}:session:{session}:seq"


def test_names_are_configured_not_hard_coded() -> None:
    assert StreamNames(prefix="x:").stream("tools:calls") == "x:tools:calls"
    assert StreamNames(shards=3).shard_streams("ev") == [
        "agentbus:{s00-1}:ev",
        "agentbus:{s01-29}:ev",
        "agentbus:{s02-8}:ev",
    ]
    with pytest.raises(ValueError, match="braces"):
        StreamNames(prefix="{x}:")
    with pytest.raises(ValueError, match="out of range"):
        StreamNames(shards=4).shard_stream(4, "ev")


@pytest.mark.parametrize("shards", [1, 2, 3, 4, 8, 16, 64])
def test_shard_tags_spread_the_shards_evenly_over_the_masters_of_a_cluster(shards: int) -> None:
    """Issue 20: each tag hashes (CLUSTER KEYSLOT, redis-py's own CRC16) into the middle of its shard's
    even share of the slots, so masters holding equal slot ranges get as many shards as the counts allow."""
    slots = [key_slot(f"agentbus:{shard_tag(shard, shards)}:log".encode()) for shard in range(shards)]
    for shard, slot in enumerate(slots):
        low, high = shard_slot_window(shard, shards)
        assert low <= slot < high
        assert shard_tag(shard, shards).startswith(f"{{s{shard:02d}-")
    for masters in (2, 3, 4, 6):
        ranges = [(m * CLUSTER_SLOTS // masters, (m + 1) * CLUSTER_SLOTS // masters) for m in range(masters)]
        counts = [sum(1 for slot in slots if low <= slot < high) for low, high in ranges]
        assert max(counts) - min(counts) <= 1, (masters, counts)


def test_bounded_rendezvous_is_balanced_and_moves_only_what_a_new_member_wins() -> None:
    """No member gets more than ceil(shards / members) shards; adding a member moves shards only to it."""
    before = assign_shards("lane", 64, ["a", "b"])
    after = assign_shards("lane", 64, ["c", "b", "a"])
    assert Counter(before) == {"a": 32, "b": 32}
    assert max(Counter(after).values()) <= 22
    moved = [shard for shard in range(64) if before[shard] != after[shard]]
    assert moved
    assert all(after[shard] == "c" for shard in moved)
    assert assign_shards("normalize", 4, ["worker-a", "worker-b"]).count("worker-a") == 2  # plain HRW: 4 to b
    assert preferred_owner("lane", 5, ["a", "b"], 64) == before[5]
    assert assign_shards("lane", 3, []) == [None, None, None]
