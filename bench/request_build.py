r"""Benchmark: the CPU of building and validating the requests of growing sessions, in-process, without Redis.

    uv run python bench/request_build.py --requests 2000 [--mix prompts|turns] [--path builder|worker]
    uv run python bench/instructions.py --sizes 400 1600 -- bench/request_build.py --mix prompts --requests {}
    uv run python bench/instructions.py --sizes 400 1600 --tree /work/wt/base -- bench/request_build.py ... {}

The sessions are shaped like ``bench/pipeline.py``'s workloads, ``--sessions`` of them interleaved:
``prompts`` alternates a prompt and a one-line reply (a request per prompt, ``prompt_workload``); ``turns``
is whole agent turns, a prompt, a reply with a tool call, its result and a final answer (a request after
the prompt and one after the result, as in ``turn_workload``; each reply here is one message, where ingestion
logs a streamed reply as one message per block, which normalization merges again by their API id). ``--path
builder`` builds each request through a per-session ``RequestBuilder`` (``to_api_request`` +
``validate_request``, as the normalization worker does); ``--path worker`` feeds every log entry, encoded
as ingestion writes it, to ``NormalizationWorker.handle`` one entry per batch (decode, history, build,
notice, the request key's write), with every session's history already cached, so Redis is never called.
``--requests`` is the total number of requests built: with ``bench/instructions.py`` the difference of two
sizes gives the instructions per request, the start-up cancelled out. Prints the CPU seconds per request.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentbus_redis.bus.events import LogEntry
from agentbus_redis.bus.session_history import SessionHistory
from agentbus_redis.messages.content import TextBlock, ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.factories import create_assistant_message, create_user_message
from agentbus_redis.messages.kinds import Message
from agentbus_redis.normalize.incremental import RequestBuilder
from agentbus_redis.observability.logging import configure_logging
from agentbus_redis.runtime.codec import entry_fields
from agentbus_redis.runtime.key_calls import KeyCalls
from agentbus_redis.streams.entries import StreamEntry
from agentbus_redis.streams.names import StreamNames
from agentbus_redis.streams.topology import Topology
from agentbus_redis.workers.normalization.worker import SENDER_FITS_THINKING, NormalizationWorker, _Session

TOPOLOGY = Topology(StreamNames(prefix="bench:", shards=4))


def prompt_turn(session: str, turn: int) -> list[Message]:
    """``prompt_workload``: a prompt (the request) and its one-line reply."""
    return [
        create_user_message(f"question {turn} of {session}: what is {turn} + {turn}?"),
        create_assistant_message(f"{turn} + {turn} is {2 * turn}."),
    ]


def agent_turn(session: str, turn: int) -> list[Message]:
    """``turn_workload``'s turn: a prompt (request), a reply calling a tool, its result (request), the answer."""
    call = ToolUseBlock(id=f"toolu_{session.replace('-', '')}_{turn}", name="Read", input={"file_path": f"m{turn}.py"})
    first = create_assistant_message([TextBlock(text=f"Turn {turn}: let me read the module before changing it."), call])
    final = create_assistant_message([TextBlock(text=f"The module defines {turn} functions; nothing needs to change.")])
    first = first.model_copy(update={"message": first.message.model_copy(update={"id": f"msg_{session}_{turn}_a"})})
    final = final.model_copy(update={"message": final.message.model_copy(update={"id": f"msg_{session}_{turn}_b"})})
    result = create_user_message([ToolResultBlock(tool_use_id=call.id, content=f"def f{turn}(): ...\n")])
    return [create_user_message(f"turn {turn}: check module m{turn}"), first, result, final]


MIXES = {"prompts": (prompt_turn, 1), "turns": (agent_turn, 2)}
"""Each mix's turn, and how many requests a turn makes."""


def log_order(mix: str, requests: int, sessions: int) -> Iterator[tuple[str, Message]]:
    """Every session's messages, sessions interleaved turn by turn, until ``requests`` requests are due."""
    make_turn, per_turn = MIXES[mix]
    turns = -(-requests // (per_turn * sessions))
    for turn in range(turns):
        for number in range(sessions):
            session = f"bench-{number}"
            for message in make_turn(session, turn):
                yield session, message


def run_builder(mix: str, requests: int, sessions: int, digest: Any = None) -> int:
    """Build each due request through the session's ``RequestBuilder`` (as ``NormalizationWorker._build``).
    With ``digest`` (a hashlib object), every request's JSON, its repairs and its violations are fed to it."""
    histories: dict[str, SessionHistory] = {}
    builders: dict[str, RequestBuilder] = {}
    built = 0
    for session, message in log_order(mix, requests, sessions):
        history = histories.get(session)
        if history is None:
            history = histories[session] = SessionHistory(session)
            builders[session] = RequestBuilder(options=SENDER_FITS_THINKING)
        history.apply(LogEntry(session_id=session, seq=history.applied_seq + 1, message=message))
        if history.needs_request():
            result = builders[session].build(history.messages)
            assert not result.violations, result.violations
            if digest is not None:
                digest.update(orjson.dumps(result.result.request))
                digest.update(orjson.dumps([repair.model_dump(mode="json") for repair in result.result.report.repairs]))
                digest.update(orjson.dumps([violation.model_dump(mode="json") for violation in result.violations]))
            history.mark_published()
            built += 1
            if built == requests:
                break
    return built


def run_worker(mix: str, requests: int, sessions: int, digest: Any = None) -> int:
    """Feed the log to ``NormalizationWorker.handle`` one entry per batch, the histories already cached.
    With ``digest`` (a hashlib object), every value the worker writes (the request key's ``SET``) is fed to it."""
    # The worker's log lines as a deployed worker writes them (JSON), to nowhere.
    configure_logging("INFO", json=True, stream=open(os.devnull, "w"))  # noqa: SIM115
    worker = NormalizationWorker(None, TOPOLOGY, max_sessions=sessions)  # type: ignore[arg-type]
    for number in range(sessions):
        session = f"bench-{number}"
        worker.histories[session] = _Session(SessionHistory(session), RequestBuilder(options=worker.options))
    seqs = dict.fromkeys(worker.histories, 0)
    # Encoded up front: ingestion's encoding is not the normalizer's cost.
    entries: list[StreamEntry] = []
    for index, (session, message) in enumerate(log_order(mix, requests, sessions)):
        seqs[session] += 1
        fields = entry_fields(LogEntry(session_id=session, seq=seqs[session], message=message))
        entries.append(StreamEntry(TOPOLOGY.log_for(session), f"{index + 1}-0", fields))

    async def feed() -> int:
        built = 0
        for entry in entries:
            outcome = await worker.handle([entry])
            if outcome.write is not None:
                calls = KeyCalls()
                outcome.write(calls)
                if digest is not None:
                    for call in calls._calls:  # what would be sent, read by the bench only
                        digest.update(repr(call).encode())
            built += len(outcome.outputs)
            if built >= requests:
                break
        return built

    return asyncio.run(feed())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--mix", choices=sorted(MIXES), default="prompts")
    parser.add_argument("--path", choices=["builder", "worker"], default="builder")
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument(
        "--digest",
        action="store_true",
        help="print a sha256 of every request's JSON, repairs and violations (builder) or of every write (worker)",
    )
    args = parser.parse_args()
    run: Any = run_builder if args.path == "builder" else run_worker
    digest = hashlib.sha256() if args.digest else None
    started = time.process_time()
    built = run(args.mix, args.requests, args.sessions, digest)
    elapsed = time.process_time() - started
    assert built == args.requests, (built, args.requests)
    print(f"{args.mix}/{args.path}: {built} requests, {elapsed / built * 1e6:.0f} µs CPU a request")
    if digest is not None:
        print(f"sha256 {digest.hexdigest()}")


if __name__ == "__main__":
    main()
