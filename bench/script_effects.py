r"""The commands the batch script (``runtime/key_calls.py``) runs inside Redis, as MONITOR records them.

    uv run python bench/script_effects.py > after.txt
    (cd /work/wt/base && .venv/bin/python /work/wt/runtime/bench/script_effects.py) > before.txt
    diff before.txt after.txt   # empty: the same effects, byte for byte

A change to how ``KeyCalls`` packs its calls, or to the script's text, must not change what Redis does. This
runs batches shaped like the workers' (outputs, some to two streams with the same fields, state writes on
repeated keys, numbers and floats, a keyless ``PUBLISH``, members, the ``XACK``) fenced, unfenced, fenced out,
and a read, on a private redis-server, and prints every command the script ran (MONITOR's ``lua`` lines,
without their timestamps) and the read's replies. It imports the checkout it runs in (the working directory
first on ``sys.path``), and only ``KeyCalls`` methods every version has (``add_xadds`` when there is one, else
``add_xadd`` per output, as the consumer then queued them).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path.cwd()))  # the checkout it runs in, not necessarily this file's (see the docstring)

import redis
import redis.asyncio as aioredis

from agentbus_redis.local.redis_server import start_local_redis
from agentbus_redis.runtime.key_calls import Fenced, KeyCalls

EPOCH = "{s}:epoch"


def batch(number: int) -> KeyCalls:
    """One batch's calls, as a worker queues them."""
    calls = KeyCalls()
    outputs: list[tuple[str, dict[str, Any], int | None]] = []
    for n in range(4):
        fields: dict[str, Any] = {"data": f"entry {number}.{n}".encode(), "auth": b"\x00\xff", "n": n, "f": 2.5}
        outputs += [("{s}:log", fields, None), ("{s}:events", fields, 1000)]
    outputs += [("{s}:jobs", outputs[-1][1], None), ("{s}:jobs", {"data": b"alone"}, 5)]
    if hasattr(calls, "add_xadds"):
        calls.add_xadds(outputs)
    else:
        for stream, fields, maxlen in outputs:
            calls.add_xadd(stream, fields, maxlen)
    for n in range(3):
        calls.add("SET", f"{{s}}:ledger:{n % 2}", f"v{number}.{n}")
        calls.add_xadd("{s}:live", {"delta": f"{number}.{n}"}, maxlen=10)
    calls.add_keyless("PUBLISH", "channel", "hello")
    calls.add_members("SADD", "{s}:seen", [f"k{number}.{n}" for n in range(5)])
    calls.add("ZADD", "{s}:deadlines", 123.5, "s1", 10**20, "s2")
    calls.add("PEXPIRE", "{s}:log", 60000)
    calls.add_members("XACK", "{s}:ingress", [f"{number}-{n}" for n in range(4)], "group")
    return calls


async def run_batches(url: str) -> list[Any]:
    client = aioredis.Redis.from_url(url)
    await client.set(EPOCH, "7")
    await batch(1).write_fenced(client, key=EPOCH, token="7")
    await batch(2).write(client)
    with contextlib.suppress(Fenced):  # fenced out: the script runs nothing but its GET of the epoch
        await batch(3).write_fenced(client, key=EPOCH, token="6")
    reads = KeyCalls()
    for command, key in [("GET", "{s}:ledger:0"), ("SCARD", "{s}:seen"), ("GET", "{s}:ledger:1"), ("XLEN", "{s}:log")]:
        reads.add(command, key)
    replies: list[Any] = await reads.read(client)
    await client.aclose()
    return replies


def main() -> None:
    server = start_local_redis(die_with_parent=True)
    recorded: list[dict[str, Any]] = []
    monitor = redis.Redis.from_url(server.url).monitor().__enter__()  # type: ignore[no-untyped-call]

    def record() -> None:
        with contextlib.suppress(redis.ConnectionError, OSError):  # the server stopped
            recorded.extend(monitor.listen())

    threading.Thread(target=record, daemon=True).start()
    time.sleep(0.3)
    replies = asyncio.run(run_batches(server.url))
    time.sleep(0.5)
    lines = [command["command"] for command in recorded if command.get("client_type") == "lua"]
    server.stop()
    sys.stdout.write("".join(f"{line}\n" for line in lines) + f"read: {replies}\n")
    sys.stdout.flush()
    os._exit(0)  # the MONITOR thread may still be reading


if __name__ == "__main__":
    main()
