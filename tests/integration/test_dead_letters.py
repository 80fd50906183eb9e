"""Issue 4, bad input: 200 malformed ingress entries of varied kinds, interleaved with good traffic, all
land in the ingress dead-letter streams with a reason naming what is wrong, while the good sessions'
requests are published as if nothing happened.

Each malformed entry carries an extra ``probe`` field (ignored by ingestion, kept byte for byte by the
dead letter), so every dead letter is matched back to the entry it came from.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
import pytest

from agentbus_redis.api.validation import validate_api_request
from agentbus_redis.bus.events import SCHEMA_VERSION
from agentbus_redis.cli.local.demo import stream_events_for
from agentbus_redis.messages.content import ContentBlock, TextBlock, ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.factories import create_assistant_message, create_user_message
from agentbus_redis.messages.kinds import AssistantMessage, UserMessage
from agentbus_redis.normalize import to_api_request
from agentbus_redis.sdk.client import AgentbusClient, PublishedRequest
from agentbus_redis.streams.deadletter import DeadLetter, dead_letter_streams, list_dead_letters
from agentbus_redis.streams.names import dead_letter_stream
from agentbus_redis.workers.normalization.worker import SENDER_FITS_THINKING as WORKER_OPTIONS
from tests.conftest import ON_EVERY_TARGET
from tests.integration.cluster import WorkerCluster, eventually

pytestmark = [pytest.mark.integration, pytest.mark.slow, ON_EVERY_TARGET]

RELAXED_TOOL_LIMITS = {"AGENTBUS_TOOLS__TIMEOUT_S": "30", "AGENTBUS_TOOLS__DEADLINE_S": "120"}

MALFORMED = 200
GOOD_SESSIONS = 6
GOOD_TURNS = 3
CHUNK = 10


# -- malformed entries -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Bad:
    """One malformed ingress entry: where it goes, its fields, and the reason it must be dead-lettered for."""

    kind: str
    reason: str
    session: str
    fields: dict[str, bytes]
    shard_of_session: bool = True
    """False: written to a shard that does not own ``session``."""


def envelope(session: str, payload: Any, **overrides: Any) -> dict[str, Any]:
    body = {"v": SCHEMA_VERSION, "session_id": session, "idempotency_key": f"bad:{uuid.uuid4()}", "payload": payload}
    body.update(overrides)
    return body


def data(value: Any) -> dict[str, bytes]:
    return {"data": value if isinstance(value, bytes) else orjson.dumps(value)}


def prompt_payload(text: str = "hello") -> dict[str, Any]:
    return {"type": "user_prompt", "content": text}


def stream_payload(request_id: str, event: Any) -> dict[str, Any]:
    return {"type": "stream_event", "request_id": request_id, "event": event}


def malformed_kinds(good: list[str]) -> list[Callable[[int], Bad]]:
    """Every kind of bad input, each a function of a running index (some aimed at good sessions)."""

    def own(i: int) -> str:
        return f"dlq-bad-{i:03d}"

    def aimed(i: int) -> str:
        """A good session: its bad entries must not disturb it."""
        return good[i % len(good)]

    assistant_wire = create_assistant_message("hi").to_wire()
    user_wire = create_user_message("hi").to_wire()
    return [
        lambda i: Bad("bad_json", "invalid_entry", own(i), data(b'{"v": 1, "session_id": ')),
        lambda i: Bad("not_an_object_array", "invalid_entry", own(i), data(b"[1, 2, 3]")),
        lambda i: Bad("not_an_object_string", "invalid_entry", own(i), data(b'"user_prompt"')),
        lambda i: Bad("not_an_object_null", "invalid_entry", own(i), data(b"null")),
        lambda i: Bad("invalid_utf8", "invalid_entry", own(i), data(b'{"v": 1, "session_id": "\xff\xfe"}')),
        lambda i: Bad("missing_data_field", "decode_error", own(i), {"body": orjson.dumps(envelope(own(i), {}))}),
        lambda i: Bad(
            "unknown_payload_type", "invalid_entry", aimed(i), data(envelope(aimed(i), {"type": "frobnicate"}))
        ),
        lambda i: Bad(
            "missing_payload", "invalid_entry", own(i), data({"v": 1, "session_id": own(i), "idempotency_key": "k"})
        ),
        lambda i: Bad(
            "newer_schema_version",
            "unsupported_schema_version",
            aimed(i),
            data(envelope(aimed(i), prompt_payload(), v=SCHEMA_VERSION + 1)),
        ),
        lambda i: Bad(
            "newer_schema_unknown_payload",
            "unsupported_schema_version",
            own(i),
            data(envelope(own(i), {"type": "user_prompt_v2", "parts": []}, v=SCHEMA_VERSION + 1)),
        ),
        lambda i: Bad(
            "schema_version_zero", "unsupported_schema_version", own(i), data(envelope(own(i), prompt_payload(), v=0))
        ),
        lambda i: Bad(
            "missing_session_id",
            "invalid_entry",
            own(i),
            data({k: v for k, v in envelope(own(i), prompt_payload()).items() if k != "session_id"}),
        ),
        lambda i: Bad("empty_session_id", "invalid_entry", own(i), data(envelope("", prompt_payload()))),
        lambda i: Bad(
            "missing_idempotency_key",
            "invalid_entry",
            aimed(i),
            data({k: v for k, v in envelope(aimed(i), prompt_payload()).items() if k != "idempotency_key"}),
        ),
        lambda i: Bad(
            "prompt_content_not_text_or_blocks",
            "invalid_entry",
            aimed(i),
            data(envelope(aimed(i), {"type": "user_prompt", "content": 42})),
        ),
        lambda i: Bad(
            "assistant_without_payload",
            "invalid_entry",
            aimed(i),
            data(envelope(aimed(i), {"type": "assistant_message", "message": {"type": "assistant", "uuid": "x"}})),
        ),
        lambda i: Bad(
            "system_notice_carrying_a_user_message",
            "invalid_entry",
            own(i),
            data(envelope(own(i), {"type": "system_message", "message": user_wire})),
        ),
        lambda i: Bad(
            "tool_result_carrying_an_assistant_message",
            "invalid_entry",
            aimed(i),
            data(envelope(aimed(i), {"type": "tool_result", "message": assistant_wire})),
        ),
        lambda i: Bad(
            "interrupt_with_unknown_reason",
            "invalid_entry",
            own(i),
            data(envelope(own(i), {"type": "interrupt", "reason": "coffee"})),
        ),
        lambda i: Bad(
            "stream_event_not_an_object",
            "invalid_entry",
            own(i),
            data(envelope(own(i), stream_payload("req_x", ["message_start"]))),
        ),
        lambda i: Bad(
            "stream_delta_before_message_start",
            "invalid_input",
            aimed(i),
            data(
                envelope(
                    aimed(i),
                    stream_payload(
                        f"req_bad_{i}",
                        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}},
                    ),
                )
            ),
        ),
        lambda i: Bad(
            "stream_delta_for_a_missing_block",
            "invalid_input",
            own(i),
            data(
                envelope(
                    own(i),
                    stream_payload(
                        "req_missing_block",
                        {"type": "content_block_delta", "index": 7, "delta": {"type": "text_delta", "text": "x"}},
                    ),
                )
            ),
        ),
        lambda i: Bad(
            "prompt_with_a_malformed_block",
            "invalid_input",
            aimed(i),
            data(envelope(aimed(i), {"type": "user_prompt", "content": [{"type": "text"}]})),
        ),
        lambda i: Bad(
            "tool_result_for_a_call_never_made",
            "invalid_input",
            aimed(i),
            data(
                envelope(
                    aimed(i),
                    {
                        "type": "tool_result",
                        "message": create_user_message(
                            [ToolResultBlock(tool_use_id=f"toolu_never_{i}", content="made up")]
                        ).to_wire(),
                    },
                )
            ),
        ),
        lambda i: Bad(
            "tool_result_without_a_result",
            "invalid_input",
            aimed(i),
            data(
                envelope(aimed(i), {"type": "tool_result", "message": create_user_message("no result here").to_wire()})
            ),
        ),
        lambda i: Bad(
            "session_on_the_wrong_shard",
            "wrong_shard",
            own(i),
            data(envelope(own(i), prompt_payload())),
            shard_of_session=False,
        ),
    ]


def preamble_for_missing_block(session: str) -> dict[str, bytes]:
    """A valid message_start, so that the delta for block 7 that follows is the only thing wrong."""
    start = stream_events_for([TextBlock(text="x")], message_id=f"msg_{uuid.uuid4().hex[:8]}", model="m")[0]
    return data(envelope(session, stream_payload("req_missing_block", start)))


async def inject(bus: AgentbusClient, bads: list[Bad], probes: dict[str, Bad]) -> None:
    """Write the malformed entries in chunks, yielding to the good traffic in between."""
    topology = bus.topology
    for start in range(0, len(bads), CHUNK):
        pipe = bus.redis.pipeline(transaction=False)
        for offset, bad in enumerate(bads[start : start + CHUNK]):
            probe = f"{start + offset}:{bad.kind}"
            probes[probe] = bad
            stream = topology.ingress_for(bad.session)
            if not bad.shard_of_session:
                stream = topology.ingress((topology.names.shard_of(bad.session) + 1) % topology.shards)
            if bad.kind == "stream_delta_for_a_missing_block":
                pipe.xadd(stream, preamble_for_missing_block(bad.session))  # type: ignore[arg-type]
            pipe.xadd(stream, {**bad.fields, "probe": probe.encode()})  # type: ignore[arg-type]
        await pipe.execute()
        await asyncio.sleep(0.05)


# -- good traffic ----------------------------------------------------------------------------------


async def converse(bus: AgentbusClient, session: str) -> list[PublishedRequest]:
    """A short session with tool calls (half of the replies streamed), waiting for each request."""
    requests: list[PublishedRequest] = []

    async def next_request() -> None:
        after = requests[-1].seq if requests else 0
        requests.append(await bus.next_request(session, after_seq=after, timeout_s=60))

    for turn in range(GOOD_TURNS):
        await bus.send_prompt(session, f"turn {turn}")
        await next_request()
        calls = [
            ToolUseBlock(id=f"toolu_{uuid.uuid4().hex[:20]}", name="Bash", input={"command": f"echo {session}-{turn}"}),
            ToolUseBlock(id=f"toolu_{uuid.uuid4().hex[:20]}", name="Read", input={"file_path": "good.txt"}),
        ]
        blocks: list[ContentBlock] = [TextBlock(text=f"Turn {turn}."), *calls]
        if turn % 2 == 0:
            message_id = f"msg_{uuid.uuid4().hex[:16]}"
            for event in stream_events_for(blocks, message_id=message_id, model="claude-test"):
                await bus.send_stream_event(session, f"req_{message_id}", event)
        else:
            await bus.send_assistant(session, create_assistant_message(blocks))
        await next_request()
        results = [b for b in requests[-1].request["messages"][-1]["content"] if b["type"] == "tool_result"]
        assert sorted(r["tool_use_id"] for r in results) == sorted(c.id for c in calls)  # R8.5 completion order
        assert not any(r.get("is_error") for r in results)
    return requests


# -- the test --------------------------------------------------------------------------------------


@pytest.mark.timeout(180)
async def test_malformed_ingress_entries_are_dead_lettered_with_reasons_while_good_traffic_flows(
    cluster: WorkerCluster,
) -> None:
    cluster.workspace.mkdir(parents=True, exist_ok=True)
    (cluster.workspace / "good.txt").write_text("good file\n")
    # A tool that times out under machine load would be a correct is_error result, not what is tested here.
    cluster.extra_env.update(RELAXED_TOOL_LIMITS)
    cluster.start_all(instances=1)
    good = [f"dlq-good-{index}" for index in range(GOOD_SESSIONS)]
    kinds = malformed_kinds(good)
    bads = [kind(index) for index, kind in zip(range(MALFORMED), itertools.cycle(kinds), strict=False)]
    assert len({bad.kind for bad in bads}) == len(kinds) >= 20
    probes: dict[str, Bad] = {}
    async with cluster.client() as bus:
        sessions = asyncio.gather(*(converse(bus, session) for session in good))
        await inject(bus, bads, probes)
        published = await sessions

        async def all_dead_lettered() -> bool:
            return len(await ingress_letters(bus)) >= MALFORMED

        await eventually(all_dead_lettered, timeout_s=30)
        letters = await ingress_letters(bus)

        # Every malformed entry is dead-lettered exactly once, for the reason its kind calls for.
        by_probe = Counter(letter.fields.get("probe", b"").decode() for letter in letters)
        assert sorted(by_probe) == sorted(probes)
        assert set(by_probe.values()) == {1}
        wrong = [
            (probe, bad.reason, letter.reason, letter.detail)
            for letter in letters
            for probe, bad in [(letter.fields["probe"].decode(), probes[letter.fields["probe"].decode()])]
            if letter.reason != bad.reason
        ]
        assert wrong == []
        for letter in letters:
            assert letter.detail, letter
            assert letter.group == "ingestion"
            assert letter.stream == dead_letter_source(letter)
            original = probes[letter.fields["probe"].decode()].fields
            assert {k: v for k, v in letter.fields.items() if k != "probe"} == original

        # Nothing else was dead-lettered: the bad input never reached the log or the normalizer.
        other = [s for s in await dead_letter_streams(bus.redis, bus.topology.names) if ":ingress:" not in s]
        assert [(s, n) for s in other if (n := await bus.redis.xlen(s))] == []

        # The good sessions got every request, and their logs hold only their own traffic.
        for session, requests in zip(good, published, strict=True):
            assert len(requests) == 2 * GOOD_TURNS
            history = [entry.message for entry in await bus.history(session)]
            assert [e.seq for e in await bus.history(session)] == list(range(1, len(history) + 1))
            assert all(isinstance(m, UserMessage | AssistantMessage) for m in history if m.type != "progress")
            texts = [
                b.text for m in history if isinstance(m, UserMessage) for b in m.blocks if isinstance(b, TextBlock)
            ]
            texts += [
                m.message.content for m in history if isinstance(m, UserMessage) and isinstance(m.message.content, str)
            ]
            assert "hello" not in texts
            results = [
                b for m in history if isinstance(m, UserMessage) for b in m.blocks if isinstance(b, ToolResultBlock)
            ]
            assert len(results) == 2 * GOOD_TURNS
            latest = await bus.latest_request(session)
            assert latest is not None
            assert latest.request == to_api_request(history, options=WORKER_OPTIONS).request
            assert validate_api_request(latest.request) == []


async def ingress_letters(bus: AgentbusClient) -> list[DeadLetter]:
    letters: list[DeadLetter] = []
    for shard in range(bus.topology.shards):
        letters += await list_dead_letters(bus.redis, dead_letter_stream(bus.topology.ingress(shard)), count=10_000)
    return letters


def dead_letter_source(letter: DeadLetter) -> str:
    """The ingress shard stream the letter says it came from (must be an ingress stream)."""
    assert letter.stream.endswith(":ingress"), letter.stream
    return letter.stream
