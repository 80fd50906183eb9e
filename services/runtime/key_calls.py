"""Many single-key commands sent as ONE command: a Lua script runs them in order on the server.

Why: redis-py's asyncio client reads every reply of a pipeline on its own, each under an asyncio timeout
(and in a MULTI/EXEC every ``QUEUED`` too): ≈ 15–30 µs of client CPU per command, whatever the command
does. A worker that writes a few keys per session per batch (ingestion: the ledger, the applied keys, a
reply's raw events, …) spent most of its time there. One ``EVAL`` carrying N calls costs one reply.

Semantics are those of the same commands sent one after another: inside a MULTI/EXEC the script runs
at EXEC, atomically with the rest. A failing call stops the script (the calls before it stay applied,
as a failing command inside a MULTI/EXEC leaves the others applied); the error is the EVAL's reply.
Every key is passed in ``KEYS``; in Redis Cluster they must share a slot (a shard's keys do, through
the ``{sNN}`` hash tag).
"""

from __future__ import annotations

from typing import Any

from redis.asyncio.client import Pipeline

_RUN = """
local results = {}
local a = 1
for i = 1, #KEYS do
  local n = tonumber(ARGV[a + 1])
  local reply = redis.call(ARGV[a], KEYS[i], unpack(ARGV, a + 2, a + 1 + n))
  if ARGV[#ARGV] == 'r' then
    results[i] = reply
  end
  a = a + 2 + n
end
if ARGV[#ARGV] == 'r' then
  return results
end
return #KEYS
"""
"""ARGV: per call ``command, nargs, args…``, then ``r`` (return every reply) or ``w`` (return the count)."""

MAX_ARGS_PER_CALL = 4000
"""Lua's ``unpack`` cannot spread much more than 8000 values; callers split larger calls."""

Arg = str | bytes | int | float


class KeyCalls:
    """Single-key commands collected in order, to run as one script (see the module docstring)."""

    __slots__ = ("_args", "_keys")

    def __init__(self) -> None:
        self._keys: list[str] = []
        self._args: list[Arg] = []

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, command: str, key: str, *args: Arg) -> None:
        """Queue ``command key args…`` (e.g. ``add("SADD", key, *members)``)."""
        if len(args) > MAX_ARGS_PER_CALL:
            msg = f"{command} {key}: {len(args)} arguments in one call (at most {MAX_ARGS_PER_CALL})"
            raise ValueError(msg)
        self._keys.append(key)
        self._args.append(command)
        self._args.append(len(args))
        self._args.extend(args)

    def add_members(self, command: str, key: str, members: list[Arg]) -> None:
        """Queue a variadic command whose members may be split over several calls (SADD, RPUSH, …)."""
        for start in range(0, len(members), MAX_ARGS_PER_CALL):
            self.add(command, key, *members[start : start + MAX_ARGS_PER_CALL])

    def queue_writes(self, pipe: Pipeline) -> None:
        """Queue the calls on ``pipe`` as one EVAL (its reply: the number of calls)."""
        if self._keys:
            pipe.eval(_RUN, len(self._keys), *self._keys, *self._args, "w")

    async def read(self, redis: Any) -> list[Any]:
        """Run the calls now (on a client or pipeline-less connection) and return every reply, in order."""
        if not self._keys:
            return []
        replies: list[Any] = await redis.eval(_RUN, len(self._keys), *self._keys, *self._args, "r")
        return replies
