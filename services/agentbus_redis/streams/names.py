"""Stream, group and key naming.

Names are configured, not hard-coded: every key the runtime touches is built from one frozen
``StreamNames`` (a prefix such as ``agentbus:``). Ordered lanes are sharded: a session's events go to
one of N shard streams chosen by a stable hash of the session id. Each shard has a Redis Cluster hash
tag (``{s07-12}``, :func:`shard_tag`) that also appears in the per-session keys of that shard, in its
lease keys and in the shard's own tool-jobs stream, requests stream and sessions index, so a shard stream
and everything its owner touches live in one slot and Lua/MULTI stay legal on Cluster (ecosystem.md
§5.3). The tags spread the shards evenly over the slot space: see :func:`shard_tag`.
"""

from __future__ import annotations

import binascii
import zlib
from dataclasses import dataclass
from functools import lru_cache

DEAD_LETTER_SUFFIX = ":dlq"


@lru_cache(maxsize=1 << 16)  # a worker asks ~4× per entry (its streams and keys); a few µs of ~50
def shard_of(session_id: str, shards: int) -> int:
    """The shard of ``session_id`` among ``shards`` lanes: crc32 of its UTF-8 bytes, mod ``shards``.

    crc32 is stable across processes and Python versions (unlike ``hash()``), so every producer and
    worker agrees on the shard without coordination. Changing ``shards`` moves sessions: it is fixed at
    install time and changed only by a migration.
    """
    if shards < 1:
        msg = f"shards must be >= 1, got {shards}"
        raise ValueError(msg)
    return zlib.crc32(session_id.encode("utf-8")) % shards


CLUSTER_SLOTS = 16384
"""Hash slots of a Redis Cluster; a key's slot is CRC16 of its hash tag, mod this."""


@lru_cache(maxsize=1024)
def shard_tag(shard: int, shards: int) -> str:
    """The Cluster hash tag of ``shard`` of ``shards``: ``{s03-5}``, the shard number and the first suffix
    whose slot lies near the middle of the shard's even share of the slots (:func:`shard_slot_window`).

    So the shards' slots are spread evenly over the 16 384, and a cluster whose masters hold equal slot
    ranges (what ``redis-cli --cluster create`` and managed clusters set up) gets as many shards on each
    master as the counts allow: 8 shards on 3 masters are 3 + 2 + 3. A plain ``{s03}`` lands where CRC16
    puts it (8 shards: 4 + 2 + 2).
    """
    low, high = shard_slot_window(shard, shards)
    suffix = 0
    while not low <= key_slot(f"s{shard:02d}-{suffix}") < high:
        suffix += 1
    return f"{{s{shard:02d}-{suffix}}}"


def shard_slot_window(shard: int, shards: int) -> tuple[int, int]:
    """The slots ``[low, high)`` the tag of ``shard`` must hash to: the middle quarter of its 1/``shards``
    share of the slot space (at least one slot), so no shard sits near a share's edge."""
    if not 0 <= shard < shards:
        msg = f"shard {shard} out of range 0..{shards - 1}"
        raise ValueError(msg)
    share = CLUSTER_SLOTS / shards
    middle = (shard + 0.5) * share
    low = int(middle - share / 8)
    return low, max(low + 1, int(middle + share / 8))


@lru_cache(maxsize=1 << 16)
def _session_key_base(prefix: str, shards: int, session_id: str) -> str:
    """``agentbus:{s07-21}:session:<id>``: what every key of the session starts with (made per batch, cached)."""
    return f"{prefix}{shard_tag(shard_of(session_id, shards), shards)}:session:{session_id}"


def key_slot(tag: str) -> int:
    """The Cluster slot of a hash tag's content (``CLUSTER KEYSLOT``: CRC16-XMODEM mod 16 384)."""
    return binascii.crc_hqx(tag.encode(), 0) % CLUSTER_SLOTS


def dead_letter_stream(stream: str) -> str:
    """The dead-letter stream of ``stream``: same name plus ``:dlq``.

    Deriving it from the source keeps the hash tag, so a shard stream and its dead letters share a slot
    and the consumer can dead-letter and ack in one pipeline on Cluster too.
    """
    return stream + DEAD_LETTER_SUFFIX


@dataclass(frozen=True, slots=True)
class StreamNames:
    """Builds every stream and key name from one ``prefix`` and the shard count."""

    prefix: str = "agentbus:"
    shards: int = 16

    def __post_init__(self) -> None:
        if self.shards < 1:
            msg = f"shards must be >= 1, got {self.shards}"
            raise ValueError(msg)
        if "{" in self.prefix or "}" in self.prefix:
            # A brace in the prefix would become the hash tag and put every key in one slot.
            msg = f"prefix must not contain braces: {self.prefix!r}"
            raise ValueError(msg)

    def stream(self, name: str) -> str:
        """An unsharded stream (the unordered pool), e.g. ``agentbus:tools:calls``."""
        return f"{self.prefix}{name}"

    def shard_stream(self, shard: int, name: str) -> str:
        """Shard ``shard`` of the sharded stream ``name``, e.g. ``agentbus:{s07-21}:session_events``."""
        self._check_shard(shard)
        return f"{self.prefix}{shard_tag(shard, self.shards)}:{name}"

    def shard_streams(self, name: str) -> list[str]:
        """All shard streams of ``name`` in shard order."""
        return [self.shard_stream(shard, name) for shard in range(self.shards)]

    def session_stream(self, session_id: str, name: str) -> str:
        """The shard stream of ``name`` that carries ``session_id``'s events."""
        return self.shard_stream(self.shard_of(session_id), name)

    def session_key(self, session_id: str, *parts: str) -> str:
        """A per-session key in its shard's slot, e.g. ``agentbus:{s07-21}:session:<id>:seq``."""
        return ":".join((_session_key_base(self.prefix, self.shards, session_id), *parts))

    def shard_of(self, session_id: str) -> int:
        """``shard_of(session_id, self.shards)``."""
        return shard_of(session_id, self.shards)

    def lease_key(self, lane: str, shard: int) -> str:
        """The ownership lease of ``shard`` in lane ``lane``: ``agentbus:lease:normalize:{s07-21}``.

        The lane name is part of the key because each worker type owns its shards independently.
        """
        self._check_shard(shard)
        return f"{self.prefix}lease:{lane}:{shard_tag(shard, self.shards)}"

    def lease_epoch_key(self, lane: str, shard: int) -> str:
        """The fencing counter of a lease, incremented on every acquisition (same slot as the lease)."""
        self._check_shard(shard)
        return f"{self.prefix}lease_epoch:{lane}:{shard_tag(shard, self.shards)}"

    def lease_members_key(self, lane: str) -> str:
        """The live members of lane ``lane`` (a sorted set scored by expiry, for rendezvous hashing)."""
        return f"{self.prefix}lease_members:{lane}"

    def dead_letter_stream(self, stream: str) -> str:
        """See the module function ``dead_letter_stream``."""
        return dead_letter_stream(stream)

    def dead_letter_pattern(self) -> str:
        """A SCAN pattern matching every dead-letter stream under this prefix."""
        return f"{self.prefix}*{DEAD_LETTER_SUFFIX}"

    def _check_shard(self, shard: int) -> None:
        if not 0 <= shard < self.shards:
            msg = f"shard {shard} out of range 0..{self.shards - 1}"
            raise ValueError(msg)
