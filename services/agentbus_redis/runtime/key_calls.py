"""Many single-key commands sent as ONE command: a Lua script runs them in order on the server.

Why: redis-py's asyncio client reads every reply of a pipeline on its own, each under an asyncio timeout
(and in a MULTI/EXEC every ``QUEUED`` too): ≈ 15–30 µs of client CPU per command, whatever the command
does. A worker that writes a few keys per session per batch (ingestion: the log entries, the ledger, the
applied keys, a reply's raw events, the ack, …) spent most of its time there. One ``EVAL`` carrying N
calls costs one reply.

A script runs atomically: no other client's command runs between its calls, so a batch's writes and its
``XACK`` land together. A **fenced** script first compares a key with a token (a shard's lease epoch)
and runs nothing when they differ: a worker that lost its lease without noticing yet (paused, CPU-starved)
cannot write or ack anything once the next owner has taken the shard (the fencing token of
ecosystem.md §5.3). A failing call stops the script (the calls before it stay applied, as a failing
command inside a MULTI/EXEC leaves the others applied); the error is the EVAL's reply.

Every key is passed in ``KEYS``. In Redis Cluster they must share a slot, and they do: every key a
batch touches carries its shard's hash tag (``streams.py``); a ``PUBLISH`` channel is not a key and is
not declared (:meth:`KeyCalls.add_keyless`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from redis.exceptions import NoScriptError, ResponseError

FENCED_PREFIX = "FENCED"
"""Start of the error a fenced script answers when the token no longer matches."""

FENCE_CHECK_LUA = f"""
local fence_holds = redis.call('GET', KEYS[1])
if fence_holds ~= ARGV[1] then
  return redis.error_reply('{FENCED_PREFIX} ' .. KEYS[1] .. ' is ' .. tostring(fence_holds) .. ', not ' .. ARGV[1])
end
"""
"""Lua that answers a ``FENCED`` error unless ``KEYS[1]`` holds ``ARGV[1]``: the start of every fenced script
(:meth:`ServerScript.run_fenced` turns the error into :class:`Fenced`)."""

_RUN = (
    """
local mode = ARGV[#ARGV - 1]
local calls = cmsgpack.unpack(ARGV[#ARGV])
local first = 0
if mode == 'f' then
"""
    + FENCE_CHECK_LUA
    + """
  first = 1
end
local results = {}
local last = false
local previous = {}
for i = 1, #calls do
  local call = calls[i]
  if call[1] == 0 then
    last = redis.call(unpack(call, 2))
  else
    local key = call[2]
    if key < 0 then
      key = -key
      local whole = {call[1], key}
      for j = 4, #call do
        whole[#whole + 1] = call[j]
      end
      for j = #previous - call[3] + 1, #previous do
        whole[#whole + 1] = previous[j]
      end
      call = whole
    end
    last = redis.call(call[1], KEYS[first + key], unpack(call, 3))
  end
  previous = call
  if mode == 'r' then
    results[i] = last
  end
end
if mode == 'r' then
  return results
end
return last
"""
)
"""ARGV: (``f`` only: the token ``KEYS[1]`` must hold,) the mode — ``r`` (return every reply), ``w`` (return
the last call's reply) or ``f`` (``w`` fenced) — and, last, every call as one MessagePack array of
``[command, n, args…]``, its key the ``n``-th of the calls' ``KEYS`` (after the fence key, if any: each key is
declared once however many calls name it), or ``[0, command, args…]`` for a keyless call. ``[command, -n, k,
args…]`` is ``[command, n, args…]`` followed by the last ``k`` arguments of the call before it: an output written
to two streams with the same fields (ingestion's log entries: the session's log and its events stream) carries
them once.
One blob instead of an argument per value: redis-py encodes each argument on its own, which cost
ingestion ~15% of its CPU."""

MAX_ARGS_PER_CALL = 4000
"""Lua's ``unpack`` cannot spread much more than 8000 values; callers split larger calls."""

Arg = str | bytes | int | float


class Fenced(Exception):  # a verdict, not a malfunction
    """A fenced write found another token in place: this worker no longer owns what it wrote for."""

    def __init__(self, key: str, token: str, reply: str) -> None:
        super().__init__(reply)
        self.key = key
        self.token = token


class ServerScript:
    """A Lua script run by SHA (``EVALSHA``), sent whole (``EVAL``) only when Redis does not know it yet (first
    use, or after a restart)."""

    __slots__ = ("sha", "source")

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()  # Redis names scripts by SHA-1

    def command(self, keys: Sequence[str], args: Sequence[Arg]) -> list[Arg]:
        """The ``EVALSHA`` :meth:`run` sends, to send with other commands in one packet (``connection_calls.py``);
        an error reply goes to :meth:`retry_fenced`."""
        return ["EVALSHA", self.sha, len(keys), *keys, *args]

    async def run(self, redis: Any, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        try:
            return await redis.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            return await redis.eval(self.source, len(keys), *keys, *args)

    async def run_fenced(self, redis: Any, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        """Run a script whose ``KEYS[1]`` must hold ``ARGV[1]`` (else it answers a ``FENCED`` error, raised here
        as :class:`Fenced`)."""
        try:
            return await self.run(redis, keys, args)
        except ResponseError as error:
            raise _fenced_or(error, keys, args) from None

    async def retry_fenced(self, redis: Any, keys: Sequence[str], args: Sequence[Arg], error: Exception) -> Any:
        """The reply of a fenced run sent with other commands (``connection_calls.py``) that answered ``error``:
        the script was not loaded yet (run it now, whole), or raise :class:`Fenced` / ``error``."""
        if isinstance(error, NoScriptError):
            return await self.run_fenced(redis, keys, args)
        if isinstance(error, ResponseError):
            raise _fenced_or(error, keys, args)
        raise error


_TEXT = (str, bytes)
"""What a call's arguments are sent as; anything else is sent as its ``repr`` (a tuple: an ``isinstance`` against
it is cheaper than against ``str | bytes``)."""


_TEXT_TYPES = frozenset(_TEXT)

_XADD_HEADS: dict[int | None, tuple[str, ...]] = {None: ("*",)}
"""What follows an XADD's key, by its ``maxlen``: ``MAXLEN ~ n *`` or ``*`` (made once, not a ``repr`` per entry)."""
XADD_HEADS_KEPT = 64
"""Distinct ``maxlen`` values :data:`_XADD_HEADS` keeps (they are constants of the workers)."""


def _xadd_head(maxlen: int | None) -> tuple[str, ...]:
    """The arguments an XADD takes before its fields (after its key), kept in :data:`_XADD_HEADS`."""
    head = ("*",) if maxlen is None else ("MAXLEN", "~", repr(maxlen), "*")
    if len(_XADD_HEADS) < XADD_HEADS_KEPT:
        _XADD_HEADS[maxlen] = head
    return head


def _as_text(args: Sequence[Arg]) -> Sequence[str | bytes]:
    """The arguments as sent: numbers as text, as Lua would format a large one with an exponent when passing
    it to Redis."""
    if _TEXT_TYPES.issuperset(map(type, args)):
        # Only exact ``str`` and ``bytes`` (entry ids, members): nothing to convert, and the check runs in C, not
        # one ``isinstance`` per argument. Anything else, subclasses included, takes the general rule below.
        return cast("Sequence[str | bytes]", args)
    return [arg if isinstance(arg, _TEXT) else repr(arg) for arg in args]


def _too_many_arguments(call: list[str | bytes | int], key: str) -> ValueError:
    """The error of a call (its command, its key's number, its arguments) with more than Lua can ``unpack``."""
    return ValueError(f"{call[0]!s} {key}: {len(call) - 2} arguments in one call (at most {MAX_ARGS_PER_CALL})")


def _fenced_or(error: ResponseError, keys: Sequence[str], args: Sequence[Arg]) -> ResponseError | Fenced:
    if str(error).startswith(FENCED_PREFIX):
        return Fenced(keys[0], str(args[0]), str(error))
    return error


_RUN_SCRIPT = ServerScript(_RUN)


class KeyCalls:
    """Single-key commands collected in order, to run as one script (see the module docstring)."""

    __slots__ = ("_calls", "_key_numbers", "_keys")

    def __init__(self) -> None:
        self._keys: list[str] = []
        """Every key the calls name, once each, in the order first named: the script's ``KEYS``."""
        self._key_numbers: dict[str, int] = {}
        """A key's place in :attr:`_keys`, counted from 1 (what a call carries after its command)."""
        self._calls: list[list[str | bytes | int]] = []

    def __len__(self) -> int:
        return len(self._calls)

    def add(self, command: str, key: str, *args: Arg) -> None:
        """Queue ``command key args…`` (e.g. ``add("SADD", key, *members)``)."""
        self._add_call(key, [command, 0, *_as_text(args)])

    def add_keyless(self, command: str, *args: Arg) -> None:
        """Queue a command that names no key (``PUBLISH channel message``): not declared in ``KEYS``, so it
        does not tie the script to a Cluster slot."""
        self._calls.append([0, command, *_as_text(args)])

    def add_members(self, command: str, key: str, members: list[Arg], *leading: Arg) -> None:
        """Queue a variadic command whose members may be split over several calls (SADD, RPUSH, XACK
        with ``leading`` = the group, …)."""
        step = MAX_ARGS_PER_CALL - len(leading)
        for start in range(0, len(members), step):
            self.add(command, key, *leading, *members[start : start + step])

    def add_xadd(self, stream: str, fields: Mapping[str, Arg] | Mapping[bytes, Arg], maxlen: int | None = None) -> None:
        """Queue ``XADD stream [MAXLEN ~ maxlen] * field value …``."""
        self.add_xadds(((stream, fields, maxlen),))

    def add_xadds(self, xadds: Iterable[tuple[str, Mapping[str, Arg] | Mapping[bytes, Arg], int | None]]) -> None:
        """Queue :meth:`add_xadd` of each ``(stream, fields, maxlen)`` in turn (a batch's outputs)."""
        # Each call built at once, in one loop (not through ``add``'s argument tuple, nor a method call per entry):
        # one is queued per entry a batch writes.
        numbers, calls = self._key_numbers, self._calls
        previous: object = None
        for stream, fields, maxlen in xadds:
            head = _XADD_HEADS.get(maxlen) or _xadd_head(maxlen)
            repeated = fields is previous and bool(fields)
            if repeated:
                # The very fields of the call before it (the same mapping, so the same arguments): sent once, the
                # script appends them again (``_RUN``). The call before passed the arguments check.
                call: list[str | bytes | int] = ["XADD", 0, 2 * len(fields), *head]
            else:
                call = ["XADD", 0, *head]
                for name, value in fields.items():
                    call.append(name if isinstance(name, _TEXT) else repr(name))
                    call.append(value if isinstance(value, _TEXT) else repr(value))
                if len(call) > MAX_ARGS_PER_CALL + 2:
                    raise _too_many_arguments(call, stream)
            number = numbers.get(stream)
            if number is None:
                number = self._declare(stream)
            call[1] = -number if repeated else number
            calls.append(call)
            previous = fields

    def _add_call(self, key: str, call: list[str | bytes | int]) -> None:
        """Queue ``call`` (its command, a placeholder for its key's number, then its arguments as text) on ``key``."""
        if len(call) > MAX_ARGS_PER_CALL + 2:
            raise _too_many_arguments(call, key)
        number = self._key_numbers.get(key)
        call[1] = number if number is not None else self._declare(key)
        self._calls.append(call)

    def _declare(self, key: str) -> int:
        """Add ``key`` to the script's ``KEYS``; its number (from 1)."""
        self._keys.append(key)
        number = self._key_numbers[key] = len(self._keys)
        return number

    async def read(self, redis: Any) -> list[Any]:
        """Run the calls now and return every reply, in order."""
        if not self._calls:
            return []
        replies: list[Any] = await _RUN_SCRIPT.run(redis, self._keys, ["r", self._blob()])
        return replies

    async def write(self, redis: Any) -> Any:
        """Run the calls now, atomically; return the last call's reply (``ResponseError`` when one failed)."""
        return await _RUN_SCRIPT.run(redis, self._keys, ["w", self._blob()]) if self._calls else None

    async def write_fenced(self, redis: Any, *, key: str, token: str) -> Any:
        """Run the calls now, atomically, only if ``key`` holds ``token``; return the last call's reply.

        Raises :class:`Fenced` (nothing ran) when ``key`` holds anything else, ``ResponseError`` when a
        call failed (the calls before it ran).
        """
        return await _RUN_SCRIPT.run_fenced(redis, *self._fenced_run(key, token))

    def fenced_command(self, *, key: str, token: str) -> list[Arg]:
        """The ``EVALSHA`` :meth:`write_fenced` sends, to write with other commands in one packet
        (``connection_calls.py``); an error reply goes to :meth:`retry_fenced`."""
        return _RUN_SCRIPT.command(*self._fenced_run(key, token))

    async def retry_fenced(self, redis: Any, *, key: str, token: str, error: Exception) -> Any:
        """The reply of a :meth:`fenced_command` that answered ``error``: the script was not loaded yet (run the
        calls now, whole), or raise :class:`Fenced` / ``error``."""
        return await _RUN_SCRIPT.retry_fenced(redis, *self._fenced_run(key, token), error)

    def _fenced_run(self, key: str, token: str) -> tuple[list[str], list[Arg]]:
        """KEYS and ARGV of the fenced run: the fence key first, its token and the ``f`` mode before the calls."""
        return [key, *self._keys], [token, "f", self._blob()]

    def _blob(self) -> bytes:
        import msgpack  # here, not at the top: only a worker's batch script packs calls (issue 27)

        # Old "raw" strings for text and bytes alike: Redis's cmsgpack predates the bin type.
        return msgpack.packb(self._calls, use_bin_type=False)  # type: ignore[no-any-return]
