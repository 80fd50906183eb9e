"""The pipeline's streams in Redis: names, topology, entries, admin, drain, retention and dead letters."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentbus_redis.streams.deadletter import (
        ORIGINAL_FIELD_PREFIX,
        REASON_ENTRY_DELETED,
        REASON_HANDLER_FAILED,
        REASON_MAX_DELIVERIES,
        REASON_OUTPUT_WRITE_FAILED,
        DeadLetter,
        DeadLetterDecodeError,
        dead_letter_streams,
        list_dead_letters,
        newest_dead_letters,
        purge_dead_letters,
        replay_dead_letter,
        show_dead_letter,
    )
    from agentbus_redis.streams.drain import (
        GroupPosition,
        StreamProgress,
        group_drained,
        group_positions,
        stream_id_key,
        stream_progress,
    )
    from agentbus_redis.streams.entries import (
        EntryDecodeError,
        EntryKey,
        RawEntry,
        StreamEntry,
        decode_entries,
        decode_text,
        field_bytes,
        id_text,
        stream_reply_entries,
    )
    from agentbus_redis.streams.names import (
        CLUSTER_SLOTS,
        DEAD_LETTER_SUFFIX,
        StreamNames,
        dead_letter_stream,
        key_slot,
        shard_of,
        shard_slot_window,
        shard_tag,
    )
    from agentbus_redis.streams.topology import (
        INGESTION_GROUP,
        LANE_OF_GROUP,
        MODEL_GROUP,
        NORMALIZATION_GROUP,
        TOOLS_GROUP,
        TRANSCRIPTS_GROUP,
        Topology,
    )

__all__ = [
    "CLUSTER_SLOTS",
    "DEAD_LETTER_SUFFIX",
    "INGESTION_GROUP",
    "LANE_OF_GROUP",
    "MODEL_GROUP",
    "NORMALIZATION_GROUP",
    "ORIGINAL_FIELD_PREFIX",
    "REASON_ENTRY_DELETED",
    "REASON_HANDLER_FAILED",
    "REASON_MAX_DELIVERIES",
    "REASON_OUTPUT_WRITE_FAILED",
    "TOOLS_GROUP",
    "TRANSCRIPTS_GROUP",
    "DeadLetter",
    "DeadLetterDecodeError",
    "EntryDecodeError",
    "EntryKey",
    "GroupPosition",
    "RawEntry",
    "StreamEntry",
    "StreamNames",
    "StreamProgress",
    "Topology",
    "dead_letter_stream",
    "dead_letter_streams",
    "decode_entries",
    "decode_text",
    "field_bytes",
    "group_drained",
    "group_positions",
    "id_text",
    "key_slot",
    "list_dead_letters",
    "newest_dead_letters",
    "purge_dead_letters",
    "replay_dead_letter",
    "shard_of",
    "shard_slot_window",
    "shard_tag",
    "show_dead_letter",
    "stream_id_key",
    "stream_progress",
    "stream_reply_entries",
]

_MODULE_OF = {
    "CLUSTER_SLOTS": "names",
    "DEAD_LETTER_SUFFIX": "names",
    "DeadLetter": "deadletter",
    "DeadLetterDecodeError": "deadletter",
    "EntryDecodeError": "entries",
    "EntryKey": "entries",
    "GroupPosition": "drain",
    "INGESTION_GROUP": "topology",
    "LANE_OF_GROUP": "topology",
    "MODEL_GROUP": "topology",
    "NORMALIZATION_GROUP": "topology",
    "ORIGINAL_FIELD_PREFIX": "deadletter",
    "REASON_ENTRY_DELETED": "deadletter",
    "REASON_HANDLER_FAILED": "deadletter",
    "REASON_MAX_DELIVERIES": "deadletter",
    "REASON_OUTPUT_WRITE_FAILED": "deadletter",
    "RawEntry": "entries",
    "StreamEntry": "entries",
    "StreamNames": "names",
    "StreamProgress": "drain",
    "TOOLS_GROUP": "topology",
    "TRANSCRIPTS_GROUP": "topology",
    "Topology": "topology",
    "dead_letter_stream": "names",
    "dead_letter_streams": "deadletter",
    "decode_entries": "entries",
    "decode_text": "entries",
    "field_bytes": "entries",
    "group_drained": "drain",
    "group_positions": "drain",
    "id_text": "entries",
    "key_slot": "names",
    "list_dead_letters": "deadletter",
    "newest_dead_letters": "deadletter",
    "purge_dead_letters": "deadletter",
    "replay_dead_letter": "deadletter",
    "shard_of": "names",
    "shard_slot_window": "names",
    "shard_tag": "names",
    "show_dead_letter": "deadletter",
    "stream_id_key": "drain",
    "stream_progress": "drain",
    "stream_reply_entries": "entries",
}


def __getattr__(name: str) -> Any:
    # The façade imports a module only when one of its names is asked for (import time matters for the CLI).
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
