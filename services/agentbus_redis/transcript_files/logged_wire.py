"""A log entry's message as the log holds it: its JSON object, for the transcript line (issue 31).

A message line is the message's wire object merged into the chain fields and the stamp (R7.3). The transcript
worker reads every message from a log entry, which ingestion wrote as ``LogEntry.to_wire_json()``: the
message's object in that JSON is what ``message.to_wire()`` gives back after the entry is validated (the wire
models are lossless and dump what they read: declared fields in their order, unknown ones as read). Taking
that object from the entry's bytes (``orjson``, a few µs) instead of dumping the validated model again
(``model_dump``, the largest share of the worker's CPU an entry with the validation) writes the same line.

The entry is still validated (``decode_log_batch``): the rules (cleaning, chain, tombstones) read the model;
only the line's JSON comes from here. A message the cleaning changed (R7.5: REPL blocks stripped,
``isVirtual`` dropped) is another object and is dumped as before. Where ``orjson`` would read the entry
otherwise than the validation did, there is no wire object here and the model is dumped:

- JSON ``orjson`` refuses (a lone surrogate escape, a number out of a double's range);
- an integer of 19 digits or more anywhere in the entry (``orjson`` reads one beyond 64 bits as a float,
  pydantic as the exact integer; a string of digits is merely not taken this way).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import orjson

from agentbus_redis.json_types import JsonObject
from agentbus_redis.messages.kinds import Message

LoggedWires = Mapping[int, tuple[Message, JsonObject]]
"""``id(message)`` → ``(message, its wire object as logged)``: the message is held, so the id stays its own."""

_LONG_INTEGER = re.compile(rb"[0-9]{19}")
"""19 digits in a row: maybe an integer ``orjson`` would not read exactly (beyond the 64-bit range)."""


def logged_message_wire(data: bytes | str) -> JsonObject | None:
    """The ``message`` object of a log entry's JSON ``data``, as read by ``orjson``; ``None`` where that could
    differ from the validated message's dump (see the module docstring) or there is no such object."""
    raw = data.encode() if isinstance(data, str) else data
    if _LONG_INTEGER.search(raw) is not None:
        return None
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    message = body.get("message") if isinstance(body, dict) else None
    return message if isinstance(message, dict) else None


def wire_of(message: Message, wires: LoggedWires | None) -> JsonObject:
    """``message``'s wire object: as logged when ``wires`` holds this very message, else its dump."""
    if wires is not None:
        known = wires.get(id(message))
        if known is not None and known[0] is message:
            return known[1]
    return message.to_wire()
