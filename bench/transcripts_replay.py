"""The transcript worker's own CPU per log entry, in one process, without the network (issue 31).

    uv run python bench/transcripts_replay.py [--mix turns|prompts] [--entries 4000] [--sessions 100] [--batch 100]
    uv run python bench/instructions.py --sizes 1000 3000 -- bench/transcripts_replay.py --entries {}

The model is ``bench/ingestion_replay.py``. The mixes of ``bench/pipeline.py`` (``turn_workload``: whole agent
turns, sessions interleaved; ``prompt_workload``: alternating prompts and replies) are applied session by
session through ``SessionLedger`` as ingestion applies them (fixed clock and ids, so every run logs the same
bytes); the first ``--entries`` log entries, encoded as ingestion writes them, go shard by shard in batches of
``--batch`` through the unmodified ``TranscriptWorker.handle`` (wrapped in ``instrument_handler`` as
``workers/transcripts/app.py`` wraps it), each batch's outcome settled as the consumer settles it (its XACK
packed, nothing sent), into a fresh data directory with the worker's store configuration (``syncfs`` where the
kernel has it). One round; its CPU seconds per entry are printed.

``--digest FILE`` also writes (and prints) the sha256 of everything the round did: every file under the data
directory (path relative to it, size, bytes; sorted by path) and every batch's outcome (its dead-lettered
entries and the settling script as packed). A change to the worker must leave it the same: run the same
script in the checkout before the change (copy it out, ``cd`` there and run it with that checkout's Python and
``PYTHONPATH=.``) and compare the two files.

The log entries are built in a child process (this script with ``--emit``): ``valgrind --tool=callgrind``
does not follow children by default, so ``bench/instructions.py`` counts the worker's code, not the ledger
that made its input. ``fsync``/``syncfs`` are kernel time, which callgrind does not count either.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson
from redis.asyncio.connection import Connection

from agentbus_redis.bus.events import IngressEnvelope
from agentbus_redis.bus.ledger import SessionLedger, new_ledger_state
from agentbus_redis.messages.envelope import StoredMessageBase
from agentbus_redis.observability.logging import configure_logging
from agentbus_redis.observability.metrics import instrument_handler
from agentbus_redis.runtime.codec import DATA_FIELD, entry_fields
from agentbus_redis.runtime.consumer import BatchOutcome
from agentbus_redis.streams.entries import StreamEntry
from agentbus_redis.streams.names import StreamNames
from agentbus_redis.streams.topology import Topology
from agentbus_redis.transcript_files.lines import SessionStamp
from agentbus_redis.transcript_files.store import StoreConfig, TranscriptStore
from agentbus_redis.workers.registry import freeze_startup_heap
from agentbus_redis.workers.transcripts.worker import TranscriptWorker
from bench.ingestion_replay import settlement
from bench.pipeline import TURN_EVENTS, prompt_workload, turn_workload

SHARDS = 4
GROUP = "transcripts"
START_MS = 1_780_000_000_000
"""Entry ids (ingress and log) count milliseconds from here: the same on every run."""
FIXED_TIME = "2026-01-01T00:00:00.000Z"


def fixed_ids(envelope: IngressEnvelope, index: int) -> IngressEnvelope:
    """``envelope`` with the random uuid, API message id and wall-clock timestamp of its message (a tool result,
    a reply: the workloads' factories draw them) replaced by fixed ones, so that every run writes the same bytes."""
    message = getattr(envelope.payload, "message", None)
    if not isinstance(message, StoredMessageBase):
        return envelope
    update: dict[str, object] = {"uuid": f"00000000-0000-4000-9000-{index:012d}", "timestamp": FIXED_TIME}
    payload = getattr(message, "message", None)
    if (
        payload is not None and getattr(payload, "id", None) is not None
    ):  # a reply's API message id (``create_assistant_message`` draws it)
        update["message"] = payload.model_copy(update={"id": f"msg_fixed_{index}"})
    fixed = message.model_copy(update=update)
    return envelope.model_copy(update={"payload": envelope.payload.model_copy(update={"message": fixed})})


def log_entries(mix: str, count: int, sessions: int) -> list[tuple[str, bytes]]:
    """The first ``count`` log entries of ``mix`` as ingestion logs them: ``(session, data field)`` in log order."""
    per_turn = TURN_EVENTS if mix == "turns" else 1
    ledgers: dict[str, SessionLedger] = {}
    uuids = itertools.count()
    out: list[tuple[str, bytes]] = []
    events = sessions * per_turn
    while len(out) < count:  # each log entry takes at least one ingress event: grow until enough
        events *= 2
        out.clear()
        ledgers.clear()
        workload = turn_workload(events, sessions) if mix == "turns" else prompt_workload(events, sessions)
        for index, (session, original) in enumerate(workload):
            envelope = fixed_ids(original, index)
            ledger = ledgers.get(session)
            if ledger is None:
                ledger = ledgers[session] = SessionLedger(
                    new_ledger_state(session),
                    clock=lambda: FIXED_TIME,
                    ids=lambda: f"00000000-0000-4000-8000-{next(uuids):012d}",
                )
            applied = ledger.apply(envelope, now_ms=START_MS + index, ingress_id=f"{START_MS + index}-0")
            out += [(session, entry_fields(entry)[DATA_FIELD]) for entry in applied.entries]
            if len(out) >= count:
                break
    return out[:count]


def batches(entries: list[tuple[str, bytes]], size: int, topology: Topology) -> list[list[StreamEntry]]:
    """The log as the transcripts consumer reads it: per shard in stream order, ``size`` entries a batch, the
    shards' batches interleaved. Log entry ids advance a millisecond an entry past the ingress ids."""
    per_shard: dict[int, list[StreamEntry]] = {}
    for index, (session, data) in enumerate(entries):
        shard = topology.names.shard_of(session)
        entry = StreamEntry(topology.log(shard), f"{START_MS + 10 * len(entries) + index}-0", {DATA_FIELD: data})
        per_shard.setdefault(shard, []).append(entry)
    chunked = [
        [entries[i : i + size] for i in range(0, len(entries), size)] for _, entries in sorted(per_shard.items())
    ]
    return [chunks[step] for step in range(max(map(len, chunked))) for chunks in chunked if step < len(chunks)]


def settle(entries: list[StreamEntry], outcome: BatchOutcome, packer: Connection) -> list[bytes]:
    """What the consumer does with the outcome: the settling script, packed as it is sent (returned); then the
    settled callback."""
    packed = settlement(entries, outcome, packer, group=GROUP)
    if outcome.on_settled is not None:
        outcome.on_settled()
    return packed


def outcome_bytes(outcome: BatchOutcome, packed: list[bytes]) -> bytes:
    """A batch's outcome for ``--digest``: its poison entries (id, reason, detail) and its settling script."""
    poison = [(entry_id, p.reason, p.detail) for entry_id, p in sorted(outcome.poison.items())]
    return orjson.dumps(poison) + b"".join(packed)


def files_digest(data_dir: Path, outcomes: list[bytes]) -> str:
    """``--digest``: sha256 of every file written (relative path, size, bytes, sorted by path) and the outcomes."""
    digest = hashlib.sha256()
    for path in sorted(path for path in data_dir.rglob("*") if path.is_file()):
        content = path.read_bytes()
        digest.update(b"file %s %d\n" % (bytes(path.relative_to(data_dir)), len(content)))
        digest.update(content)
    for outcome in outcomes:
        digest.update(b"outcome %d\n" % len(outcome))
        digest.update(outcome)
    return digest.hexdigest()


async def replay(work: list[list[StreamEntry]], data_dir: Path, outcomes: list[bytes] | None = None) -> float:
    """A fresh worker and store (as ``workers/transcripts/app.py`` configures them) through ``work``: CPU seconds.
    Each batch's outcome is appended to ``outcomes`` when given (``--digest``)."""
    store = TranscriptStore(data_dir, StoreConfig(stamp=SessionStamp(entrypoint="agentbus", git_branch=None)))
    # The runtime's on_new_session writes a sub-agent's sidecar; these sessions are no sub-agents: left out.
    worker = TranscriptWorker(store, cwd="/srv/agentbus")
    handler = instrument_handler("transcripts", worker.handler_for(0, 1))
    packer = Connection()
    started = time.process_time()
    for entries in work:
        outcome = await handler(entries)
        packed = settle(entries, outcome, packer)
        if outcomes is not None:
            outcomes.append(outcome_bytes(outcome, packed))
    spent = time.process_time() - started
    await store.close()
    return spent


def emitted(args: argparse.Namespace) -> list[tuple[str, bytes]]:
    """The log entries, built by a child process (not counted by callgrind: see the module docstring)."""
    command = [sys.executable, __file__, "--emit", "--mix", args.mix, "--entries", str(args.entries)]
    command += ["--sessions", str(args.sessions)]
    output = subprocess.run(command, check=True, capture_output=True).stdout
    return [(session, data.encode()) for session, data in orjson.loads(output)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mix", choices=("turns", "prompts"), default="turns")
    parser.add_argument("--entries", type=int, default=4000, help="log entries replayed")
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--batch", type=int, default=100, help="entries a batch (the consumer's read count)")
    parser.add_argument("--emit", action="store_true", help="print the log entries as JSON and exit")
    parser.add_argument("--digest", type=Path, help="write the sha256 of every file written and outcome here")
    args = parser.parse_args()
    if args.emit:
        entries = log_entries(args.mix, args.entries, args.sessions)
        sys.stdout.buffer.write(orjson.dumps([(session, data.decode()) for session, data in entries]))
        return
    # As a worker logs (JSON lines at INFO), to nowhere: the rendering is the worker's cost, the terminal is not.
    configure_logging("INFO", json=True, stream=open(os.devnull, "w"))  # noqa: SIM115 - the process's lifetime
    topology = Topology(StreamNames(prefix="bench:", shards=SHARDS))
    work = batches(emitted(args), args.batch, topology)
    freeze_startup_heap()  # the garbage collector as a worker process tunes it after its startup
    with tempfile.TemporaryDirectory(prefix="agentbus-transcripts-replay-") as data_dir:
        outcomes: list[bytes] | None = [] if args.digest is not None else None
        spent = asyncio.run(replay(work, Path(data_dir), outcomes))
        if outcomes is not None:
            full = files_digest(Path(data_dir), outcomes)
            args.digest.write_text(full + "\n")
            print(f"digest {full}")
        files = sorted(Path(data_dir).rglob("*.jsonl"))
        lines = sum(len(path.read_bytes().splitlines()) for path in files)
        # What was written, path and bytes: a change to the worker must leave it the same.
        digest = hashlib.sha256(b"".join(bytes(path.relative_to(data_dir)) + path.read_bytes() for path in files))
    print(
        f"transcripts, {args.mix} mix, {args.entries} log entries over {args.sessions} sessions, batches of "
        f"{args.batch}: {spent / args.entries * 1e6:.1f} µs CPU an entry ({lines} lines written, "
        f"sha256 {digest.hexdigest()[:16]})"
    )


if __name__ == "__main__":
    main()
