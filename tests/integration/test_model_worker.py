"""Issue 18, the model worker: every worker a process, a real Redis, the fake Anthropic-compatible server
over real HTTP (its own process), scripted per session. Each test plays one session to the end of its turn
and checks the log: the spec's behaviour (M4 retries with their backoff, M5 non-streaming fallback with
tombstones, M6 fallback model, M7 exact error texts, R10.1 interrupts) and never an unpaired tool_use.

The backoff schedule runs scaled down (``retry_base_delay_ms`` = 200 instead of 500); the times the fake
server recorded for each request are checked against the delays the worker announced in its ``api_error``
notices (M4.4): each gap is at least the delay announced for it, and each delay lies in its attempt's window of
the pure schedule of ``model/retry.py``. (No upper bound on a gap: on a loaded machine a wake-up can come late.)
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid
from typing import Any

import orjson
import pytest

from agentbus_redis.api.validation import validate_api_request
from agentbus_redis.config.settings import Settings
from agentbus_redis.json_types import JsonObject
from agentbus_redis.messages.constants import max_output_tokens_error
from agentbus_redis.messages.kinds import AssistantMessage, UserMessage
from agentbus_redis.messages.system import ApiErrorSystemMessage, InformationalSystemMessage
from agentbus_redis.model.betas import SYSTEM_MESSAGE_BETAS
from agentbus_redis.model.error_texts import REQUEST_TOO_LARGE, switched_model_notice
from agentbus_redis.model.limits.window import OUTPUT_TOKEN_RECOVERY_MESSAGE
from agentbus_redis.model.retry import backoff_window_ms
from agentbus_redis.sdk.replay import replay_transcript
from agentbus_redis.streams.topology import Topology
from tests.integration.cluster import WorkerCluster
from tests.integration.fake_model import FakeModelProcess
from tests.integration.model_turns import (
    assert_every_tool_use_answered_once,
    ended_with,
    http_error,
    live_messages,
    reply,
    text,
    text_of,
    tombstones,
    tool_use,
    turn_ended,
    wait_for,
)
from tests.shared.generated_sessions import current_client_session

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

MODEL = "claude-sonnet-4-6"
FALLBACK = "claude-haiku-4-5"
BASE_MS = 200.0
MAX_MS = 800.0
MAX_RETRIES = 4
MODEL_MAX_TOKENS = 32_000
"""M1.5: the default ``max_tokens`` of ``MODEL`` (sonnet-4-6), which the M8.3 error quotes."""


@pytest.fixture(scope="module")
def deployment(module_cluster: WorkerCluster, fake: FakeModelProcess) -> WorkerCluster:
    module_cluster.extra_env.update(
        {
            "ANTHROPIC_API_KEY": "sk-ant-test",
            "AGENTBUS_MODEL__BASE_URL": fake.base_url,
            "AGENTBUS_MODEL__MODEL": MODEL,
            "AGENTBUS_MODEL__RETRY_BASE_DELAY_MS": str(BASE_MS),
            "AGENTBUS_MODEL__RETRY_MAX_DELAY_MS": str(MAX_MS),
            "AGENTBUS_MODEL__MAX_RETRIES": str(MAX_RETRIES),
            # The default call lease (10 s), not a short one: these tests check the exact requests of a call (its
            # retries, its non-streaming repeat), and a worker starved past a short lease rightly loses it and the
            # request is called again whole (a loaded full suite saw [stream, stream, stream]). Leases that expire
            # and renew are tests/integration/test_loop_outlives_ttls.py's and the soak's.
        }
    )
    for name in ("ingestion", "normalization", "transcripts", "tools", "model"):
        module_cluster.start(name)
    module_cluster.wait_ready(timeout_s=240)  # a loaded machine starts five Python processes slowly
    (module_cluster.workspace / "README.md").write_text("# demo\n", encoding="utf-8")
    return module_cluster


def new_session() -> str:
    return f"model-{uuid.uuid4().hex[:12]}"


async def set_fallback_model(cluster: WorkerCluster, session: str, fallback: str) -> None:
    async with cluster.client() as client:
        await client.redis.set(
            Topology(cluster.names).session_config(session), orjson.dumps({"fallback_model": fallback})
        )


def gaps_ms(requests: list[dict[str, Any]]) -> list[float]:
    times = [float(r["at_ms"]) for r in requests]
    return [later - earlier for earlier, later in itertools.pairwise(times)]


async def test_m2_multi_turn_conversation_with_parallel_tool_calls_ends_valid(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    session = new_session()
    fake.script(
        session,
        [
            reply(
                text("I'll read the README and list the files."),
                tool_use("toolu_read_1", "Read", file_path="README.md"),
                tool_use("toolu_glob_1", "Glob", pattern="*"),
            ),
            reply(text("The workspace holds a README.")),
            reply(text("{{echo}}")),
        ],
    )
    async with deployment.client() as client:
        await client.send_prompt(session, "Look around.")
        first = await wait_for(client, session, turn_ended)
        await client.send_prompt(session, "And now?")
        history = await wait_for(client, session, lambda h: turn_ended(h) and len(h) > len(first))
    assert_every_tool_use_answered_once(history)
    assert tombstones(history) == []
    live = live_messages(history)
    assistants = [m for m in live if isinstance(m, AssistantMessage)]
    assert [text_of(m) for m in assistants if text_of(m)] == [
        "I'll read the README and list the files.",
        "The workspace holds a README.",
        "And now?",
    ]
    results = [m for m in live if isinstance(m, UserMessage) and m.tool_use_result is not None]
    assert any("# demo" in json.dumps(m.model_dump(mode="json")) for m in results)
    requests = fake.requests(session)
    assert [r["body"].get("stream") for r in requests] == [True, True, True]
    assert all(r["headers"].get("x-client-request-id") for r in requests)  # M1.2
    assert all(session in json.loads(r["body"]["metadata"]["user_id"])["session_id"] for r in requests)  # M1.3
    second = requests[1]["body"]["messages"]
    answered = {
        block["tool_use_id"]
        for message in second
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    }
    assert answered == {"toolu_read_1", "toolu_glob_1"}
    # A request without system-role messages goes to the plain Messages API, naming no beta.
    assert all("anthropic-beta" not in r["headers"] for r in requests)


async def test_system_role_messages_go_to_the_beta_api_naming_the_clients_betas(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    """A Claude Code 2.1.332 history (system-role attachments) resumed with a prompt: its request holds
    ``role: "system"`` messages and reaches the server through the SDK's beta Messages API with the
    ``anthropic-beta`` header naming the betas the client names for them (``model/betas.py``): a broken
    stream, its non-streaming repeat (M5.2) with a tool call, then the answer streamed whole. (Claude Code
    also adds ``?beta=true`` to the URL; the Python SDK 2.13's beta API does not: the path is the same.)"""
    session = new_session()
    fake.script(
        session,
        [
            reply(text("Looking."), fail_after_events=1, fail_with="drop"),
            reply(text("Reading it whole."), tool_use("toolu_sys_read", "Read", file_path="README.md")),
            reply(text("Noted.")),
        ],
    )
    settings = Settings(
        redis_url=deployment.redis_url,
        data_dir=deployment.data_dir,
        shards=deployment.names.shards,
        cwd=deployment.cwd,
    )
    async with deployment.client() as client:
        await replay_transcript(
            client, current_client_session(), session_id=session, settings=settings, timeout_s=120, wait_all=True
        )
        await client.send_prompt(session, "continue")
        history = await wait_for(client, session, ended_with("Noted."))
    assert_every_tool_use_answered_once(history)
    requests = fake.requests(session)
    assert [r["body"].get("stream", False) for r in requests] == [True, False, True]
    for request in requests:
        assert any(message["role"] == "system" for message in request["body"]["messages"])
        assert request["headers"]["anthropic-beta"] == ",".join(SYSTEM_MESSAGE_BETAS)
        assert request["step_kind"] == "reply"


async def test_m4_3_429_waits_exactly_retry_after(deployment: WorkerCluster, fake: FakeModelProcess) -> None:
    session = new_session()
    fake.script(
        session,
        [
            http_error(
                429,
                "rate_limit_error",
                "Number of request tokens has exceeded your per-minute rate limit",
                **{"retry-after": "1"},
            ),
            reply(text("ok")),
        ],
    )
    async with deployment.client() as client:
        await client.send_prompt(session, "hi")
        history = await wait_for(client, session, turn_ended)
    notices = [m for m in live_messages(history) if isinstance(m, ApiErrorSystemMessage)]
    # retry-after: exactly that many seconds, no jitter, no cap (M4.3); announced before the sleep (M4.4).
    assert [(n.retry_attempt, n.retry_in_ms, n.max_retries) for n in notices] == [(1, 1000, MAX_RETRIES)]
    (gap,) = gaps_ms(fake.requests(session))
    assert gap >= 1000, f"waited {gap:.1f} ms"  # the header's delay (the notice says it was not the backoff's)
    assert text_of(live_messages(history)[-1]) == "ok"


async def test_m4_3_500s_retry_on_the_backoff_schedule(deployment: WorkerCluster, fake: FakeModelProcess) -> None:
    session = new_session()
    fake.script(session, [http_error(500, "api_error", "Internal server error")] * 3 + [reply(text("recovered"))])
    async with deployment.client() as client:
        await client.send_prompt(session, "hi")
        history = await wait_for(client, session, turn_ended)
    gaps = gaps_ms(fake.requests(session))
    notices = [m for m in live_messages(history) if isinstance(m, ApiErrorSystemMessage)]
    assert [n.retry_attempt for n in notices] == [1, 2, 3]
    assert len(gaps) == 3
    for gap, notice in zip(gaps, notices, strict=True):
        low, high = backoff_window_ms(notice.retry_attempt or 0, base_ms=BASE_MS, max_ms=MAX_MS)
        assert low <= (notice.retry_in_ms or 0) < high
        assert gap >= (notice.retry_in_ms or 0), f"attempt {notice.retry_attempt}: waited {gap:.1f} ms"
    assert text_of(live_messages(history)[-1]) == "recovered"


async def test_m7_2_exhausted_500s_end_with_the_exact_api_error_text(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    session = new_session()
    fake.script(session, [http_error(500, "api_error", "Internal server error")] * (MAX_RETRIES + 1))
    async with deployment.client() as client:
        await client.send_prompt(session, "hi")
        history = await wait_for(client, session, turn_ended)
    assert len(fake.requests(session)) == MAX_RETRIES + 1  # M4.2: attempts 1 … max_retries + 1
    last = live_messages(history)[-1]
    assert isinstance(last, AssistantMessage)
    assert last.is_api_error_message
    assert last.message.model == "<synthetic>"
    prefix = "API Error: 500 "
    assert text_of(last).startswith(prefix)
    body = json.loads(text_of(last)[len(prefix) :])  # compact JSON of the error body (M7.2)
    assert body["error"] == {"type": "api_error", "message": "Internal server error"}
    assert text_of(last) == prefix + json.dumps(body, separators=(",", ":"), ensure_ascii=False)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (
            http_error(400, "invalid_request_error", "prompt is too long: 137500 tokens > 135000 maximum"),
            "Prompt is too long",
        ),
        (
            http_error(413, "request_too_large", "Request exceeds the maximum allowed number of bytes"),
            REQUEST_TOO_LARGE,
        ),
    ],
)
async def test_m7_2_not_retryable_errors_give_up_at_once_with_their_text(
    deployment: WorkerCluster, fake: FakeModelProcess, error: dict[str, Any], expected: str
) -> None:
    session = new_session()
    fake.script(session, [error])
    async with deployment.client() as client:
        await client.send_prompt(session, "hi")
        history = await wait_for(client, session, turn_ended)
    assert len(fake.requests(session)) == 1
    last = live_messages(history)[-1]
    assert isinstance(last, AssistantMessage)
    assert text_of(last) == expected
    assert last.error == "invalid_request"
    assert isinstance(last.error_details, str)


TWO_BLOCKS_THEN_A_CALL = (
    text("First I will look."),
    text("Then I will read."),
    tool_use("toolu_partial", "Read", file_path="README.md"),
)


EVENTS_BEFORE_THE_CALL = 1 + 2 * 3
"""message_start, then each text block as start, one delta (``chunk_chars`` above its length), stop: failing
right after them leaves two finished blocks, the first logged, the second held back (tombstone material)."""
WHOLE_BLOCKS = 1000


@pytest.mark.parametrize("fail_with", ["overloaded_error", "drop"])
async def test_m5_broken_stream_is_tombstoned_and_repeated_without_streaming(
    deployment: WorkerCluster, fake: FakeModelProcess, fail_with: str
) -> None:
    session = new_session()
    fake.script(
        session,
        [
            reply(
                *TWO_BLOCKS_THEN_A_CALL,
                fail_after_events=EVENTS_BEFORE_THE_CALL,
                chunk_chars=WHOLE_BLOCKS,
                fail_with=fail_with,
            ),
            reply(text("Reading it whole."), tool_use("toolu_whole", "Read", file_path="README.md")),
            reply(text("Done.")),
        ],
    )
    async with deployment.client() as client:
        await client.send_prompt(session, "go")
        history = await wait_for(client, session, turn_ended)
    requests = fake.requests(session)
    assert [r["body"].get("stream", False) for r in requests] == [True, False, True]
    assert requests[1]["body"]["max_tokens"] <= 64_000  # M1.7
    dead = tombstones(history)
    assert [text_of(t.message) for t in dead] == ["First I will look."]  # the second was still held back
    assert_every_tool_use_answered_once(history)
    whole = [m for m in live_messages(history) if isinstance(m, AssistantMessage) and "Reading it whole." in text_of(m)]
    assert len(whole) == 1
    assert [b.type for b in whole[0].blocks] == ["text", "tool_use"]  # one message holds every block (M5.2)
    assert text_of(live_messages(history)[-1]) == "Done."


async def test_m2_5_a_complete_stream_ending_without_message_stop_is_the_reply(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    """M2.5: a stream with a finished block and a stop reason that then simply ends (no ``message_stop``, no
    error) is not a failed stream: no fallback, no tombstone, the reply is logged as it came."""
    session = new_session()
    everything_but_message_stop = 1 + 3 + 1  # message_start; the block's start, delta, stop; message_delta
    fake.script(
        session,
        [
            reply(
                text("Complete, unterminated."),
                chunk_chars=WHOLE_BLOCKS,
                fail_after_events=everything_but_message_stop,
                fail_with="end",
            )
        ],
    )
    async with deployment.client() as client:
        await client.send_prompt(session, "go")
        history = await wait_for(client, session, turn_ended)
    assert [r["body"].get("stream", False) for r in fake.requests(session)] == [True]
    assert not tombstones(history)
    replies = [m for m in live_messages(history) if isinstance(m, AssistantMessage)]
    assert [(text_of(m), m.message.stop_reason) for m in replies] == [("Complete, unterminated.", "end_turn")]


async def test_m2_5_a_stream_ending_after_message_start_falls_back_to_non_streaming(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    """M2.5 / M5.1 (b): ``message_start`` and then a clean end (no block, no stop reason) is a failed stream."""
    session = new_session()
    fake.script(
        session,
        [reply(text("never seen"), fail_after_events=1, fail_with="end"), reply(text("The whole reply."))],
    )
    async with deployment.client() as client:
        await client.send_prompt(session, "go")
        history = await wait_for(client, session, turn_ended)
    assert [r["body"].get("stream", False) for r in fake.requests(session)] == [True, False]
    replies = [m for m in live_messages(history) if isinstance(m, AssistantMessage)]
    assert [text_of(m) for m in replies] == ["The whole reply."]


async def test_m6_three_overloads_switch_to_the_fallback_model_with_tombstones(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    session = new_session()
    await set_fallback_model(deployment, session, FALLBACK)
    fake.script(
        session,
        [
            reply(
                *TWO_BLOCKS_THEN_A_CALL,
                fail_after_events=EVENTS_BEFORE_THE_CALL,
                chunk_chars=WHOLE_BLOCKS,
                fail_with="overloaded_error",
            ),
            http_error(529, "overloaded_error", "Overloaded"),  # non-streaming fallback: the counter started at 1
            http_error(529, "overloaded_error", "Overloaded"),
            reply(text("On the fallback model."), tool_use("toolu_fb", "Read", file_path="README.md")),
            reply(text("Done.")),
        ],
    )
    async with deployment.client() as client:
        await client.send_prompt(session, "go")
        history = await wait_for(client, session, turn_ended)
    requests = fake.requests(session)
    assert [(r["body"]["model"], r["body"].get("stream", False)) for r in requests] == [
        (MODEL, True),
        (MODEL, False),
        (MODEL, False),
        (FALLBACK, True),
        (FALLBACK, True),
    ]
    assert [text_of(t.message) for t in tombstones(history)] == ["First I will look."]
    warnings = [m for m in live_messages(history) if isinstance(m, InformationalSystemMessage)]
    assert [(w.content, w.level) for w in warnings] == [(switched_model_notice(FALLBACK, MODEL), "warning")]
    assert_every_tool_use_answered_once(history)
    assert text_of(live_messages(history)[-1]) == "Done."


SIGNED_THINKING: JsonObject = {
    "type": "thinking",
    "thinking": "The user wants the README — “read it”, then answer.\nPaths: C:\\tmp ü 🙂 </thinking>",
    "signature": "EqQBCkYIBxgCKkB9fake+sig/with==padding",
}
REDACTED_THINKING: JsonObject = {
    "type": "redacted_thinking",
    "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rA==",
}

FALLBACK_THINKING: JsonObject = {"type": "thinking", "thinking": "on the fallback", "signature": "sig-fallback"}


def thinking_blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for b in message["content"] if isinstance(b, dict) and b["type"] in ("thinking", "redacted_thinking")]


async def test_api_1_10_second_call_of_a_tool_loop_carries_the_first_replys_thinking_byte_for_byte(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    """API §1.10 / M1.6: with thinking on, the call that continues a tool loop passes the previous reply's
    thinking and redacted_thinking back exactly as streamed (thinking in 7-character deltas, the signature
    in its own delta), first in the assistant message, and keeps thinking on (the normalization worker no
    longer strips the open turn; ``build_model_params`` sends thinking because the turn starts with it)."""
    session = new_session()
    fake.script(
        session,
        [
            reply(
                SIGNED_THINKING,
                REDACTED_THINKING,
                text("Reading it."),
                tool_use("toolu_think_1", "Read", file_path="README.md"),
                chunk_chars=7,
            ),
            reply(text("It says demo.")),
        ],
    )
    async with deployment.client() as client:
        await client.send_prompt(session, "What does the README say?")
        history = await wait_for(client, session, turn_ended)
    assert_every_tool_use_answered_once(history)
    first, second = (r["body"] for r in fake.requests(session))
    assert first["thinking"] == second["thinking"] == {"type": "adaptive"}  # claude-sonnet-4-6: M1.6
    continued = second["messages"][1]
    assert continued["role"] == "assistant"
    assert continued["content"][:2] == [SIGNED_THINKING, REDACTED_THINKING]
    assert orjson.dumps(continued["content"][:2]) == orjson.dumps([SIGNED_THINKING, REDACTED_THINKING])
    assert [b["type"] for b in continued["content"][2:]] == ["text", "tool_use"]
    assert second["messages"][2]["content"][0]["tool_use_id"] == "toolu_think_1"
    assert validate_api_request(second, thinking_enabled=True) == []


async def test_m6_6_a_tool_loop_switched_to_the_fallback_model_replays_no_thinking(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    """M6.3 step 4 / M6.6: signatures are bound to their model. After three overloads the loop goes on on the
    fallback model (M6.3.1); neither the switched call nor the next call of the loop replays thinking — the
    primary model's would fail its signature check — and both go without thinking (API §1.10)."""
    session = new_session()
    await set_fallback_model(deployment, session, FALLBACK)
    fake.script(
        session,
        [
            reply(SIGNED_THINKING, tool_use("toolu_fb_think_1", "Read", file_path="README.md")),
            *[http_error(529, "overloaded_error", "Overloaded")] * 3,
            reply(
                FALLBACK_THINKING,
                tool_use("toolu_fb_think_2", "Glob", pattern="*"),
            ),
            reply(text("Done.")),
        ],
    )
    async with deployment.client() as client:
        await client.send_prompt(session, "go")
        history = await wait_for(client, session, turn_ended)
    assert_every_tool_use_answered_once(history)
    bodies = [r["body"] for r in fake.requests(session)]
    assert [body["model"] for body in bodies] == [MODEL] * 4 + [FALLBACK] * 2
    assert bodies[1]["messages"][1]["content"][0] == SIGNED_THINKING  # the primary model continues with it
    for body in bodies[4:]:
        assert "thinking" not in body
        assert [thinking_blocks(m) for m in body["messages"] if m["role"] == "assistant"] == [[]] * (
            len(body["messages"]) // 2
        )
        assert validate_api_request(body, thinking_enabled=False) == []
    assert text_of(live_messages(history)[-1]) == "Done."


async def test_m6_4_three_overloads_without_fallback_model_give_up(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    session = new_session()
    fake.script(session, [http_error(529, "overloaded_error", "Overloaded")] * 3)
    async with deployment.client() as client:
        await client.send_prompt(session, "go")
        history = await wait_for(client, session, turn_ended)
    assert len(fake.requests(session)) == 3
    assert text_of(live_messages(history)[-1]) == "API Error: Repeated 529 Overloaded errors"


async def test_r10_1_interrupt_mid_stream_closes_the_http_stream_at_once(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    """M2.9: the interrupt aborts the call mid-stream — the HTTP stream is closed by the worker (the server sees
    the client leave, with most of the reply unsent), not read to its end. How fast is measured, not asserted:
    ``agentbus_model_interrupt_abort_seconds`` (no wall-clock thresholds in tests)."""
    session = new_session()
    fake.script(
        session,
        [
            reply(
                text("Starting."),
                tool_use("toolu_slow", "Read", file_path="README.md"),
                text("never finished " * 20),
                chunk_delay_ms=150,
            )
        ],
    )
    topology = Topology(deployment.names)
    async with deployment.client() as client:
        await client.send_prompt(session, "go")
        # Wait until the first block was streamed and the tool block is under way.
        await wait_for(client, session, lambda h: len(h) >= 1, timeout_s=30)
        inflight_key = topology.model_inflight(session)
        deadline = time.monotonic() + 30
        while True:
            raw = await client.redis.get(inflight_key)
            if raw is not None and orjson.loads(raw).get("state") == "streaming":
                break
            assert time.monotonic() < deadline, "the call never started streaming"
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.6)  # the text block is done, the tool block streams
        interrupted_at_ms = time.time() * 1000
        await client.interrupt(session)
        while True:
            record = orjson.loads(await client.redis.get(inflight_key) or b"{}")
            if record.get("state") == "interrupted":
                break
            assert time.monotonic() < deadline + 30, "the call was never aborted"
            await asyncio.sleep(0.005)
        history = await wait_for(client, session, turn_ended)
    assert record["aborted_at_ms"] >= interrupted_at_ms
    # The server saw the client leave (the HTTP stream was closed, not just no longer read).
    (call,) = fake.requests(session)
    assert call["ended"] == "client_left", call
    assert call["ended_at_ms"] >= interrupted_at_ms
    live = live_messages(history)
    assert text_of(live[-1]) == "[Request interrupted by user]"
    assert "Starting." in [text_of(m) for m in live if isinstance(m, AssistantMessage)]
    assert not any("never finished" in text_of(m) for m in live)
    assert_every_tool_use_answered_once(history)
    assert len(fake.requests(session)) == 1
    await asyncio.sleep(0.5)  # nothing else arrives for the interrupted request
    async with deployment.client() as client:
        assert len(await client.history(session)) == len(history)


async def test_r10_1_interrupt_before_the_first_event_ends_the_turn_with_the_text(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    """The model call is under way (the fake server holds the request) but nothing has streamed: as in Claude
    Code, the abort ends the turn with ``[Request interrupted by user]`` (R10.1, no assistant message
    collected), the call is aborted, and its late reply never reaches the log."""
    session = new_session()
    fake.script(session, [reply(text("Too late."), first_chunk_delay_ms=3000)])
    topology = Topology(deployment.names)
    async with deployment.client() as client:
        await client.send_prompt(session, "go")
        deadline = time.monotonic() + 60
        while not fake.requests(session):
            assert time.monotonic() < deadline, "the call never reached the model server"
            await asyncio.sleep(0.01)
        await client.interrupt(session)
        history = await wait_for(client, session, turn_ended)
        while orjson.loads(await client.redis.get(topology.model_inflight(session)) or b"{}").get("state") != (
            "interrupted"
        ):
            assert time.monotonic() < deadline + 60, "the call was never aborted"
            await asyncio.sleep(0.01)
        await asyncio.sleep(3.5)  # past the reply's delay: nothing more may be logged
        after = await client.history(session)
    assert [text_of(m) for m in live_messages(history)] == ["go", "[Request interrupted by user]"]
    assert len(after) == len(history)
    assert not any(isinstance(m, AssistantMessage) for m in live_messages(after))
    assert len(fake.requests(session)) == 1


async def test_m8_5_a_reply_cut_by_max_tokens_is_resumed_and_its_error_withheld(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    """M8.3/M8.5, gates off: the cut reply is kept, the meta message asks for the rest, the second call answers;
    the ``max_tokens`` error of the cut reply is withheld (never logged): recovery was possible."""
    session = new_session()
    fake.script(
        session,
        [reply(text("The first half"), stop_reason="max_tokens"), reply(text("and the second half."))],
    )
    async with deployment.client() as client:
        await client.send_prompt(session, "Write a lot.")
        history = await wait_for(client, session, ended_with("and the second half."))
    requests = fake.requests(session)
    assert len(requests) == 2
    max_tokens = requests[0]["body"]["max_tokens"]
    texts = [text_of(m) for m in live_messages(history)]
    assert OUTPUT_TOKEN_RECOVERY_MESSAGE in json.dumps(requests[1]["body"]["messages"][-1], ensure_ascii=False)
    assert (
        texts.index("The first half") < texts.index(OUTPUT_TOKEN_RECOVERY_MESSAGE) < texts.index("and the second half.")
    )
    assert max_output_tokens_error(max_tokens) not in texts
    assert not any(isinstance(m, AssistantMessage) and m.is_api_error_message for m in live_messages(history))


async def test_m8_5_after_three_resumptions_the_withheld_error_is_emitted_and_the_turn_ends(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    """M8.5 ``MAX_OUTPUT_TOKENS_RECOVERY_LIMIT`` = 3 (M12's vector): three resumptions, then the fourth cut reply's
    M8.3 error is emitted, exactly once, and nothing more is asked."""
    session = new_session()
    fake.script(session, [reply(text(f"Part {n}"), stop_reason="max_tokens") for n in range(1, 5)])
    async with deployment.client() as client:
        await client.send_prompt(session, "Write a lot.")
        history = await wait_for(client, session, ended_with(max_output_tokens_error(MODEL_MAX_TOKENS)))
    requests = fake.requests(session)
    assert len(requests) == 4
    max_tokens = requests[0]["body"]["max_tokens"]
    assert [r["body"]["max_tokens"] for r in requests] == [max_tokens] * 4  # gates off: no escalation
    texts = [text_of(m) for m in live_messages(history)]
    assert texts.count(OUTPUT_TOKEN_RECOVERY_MESSAGE) == 3
    assert texts.count(max_output_tokens_error(max_tokens)) == 1
    assert texts[-2:] == ["Part 4", max_output_tokens_error(max_tokens)]
    (error,) = [m for m in live_messages(history) if isinstance(m, AssistantMessage) and m.is_api_error_message]
    assert (error.api_error, error.error) == ("max_output_tokens", "max_output_tokens")


async def test_m8_5_a_cut_reply_with_a_tool_call_runs_the_tool_without_recovery(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    """M8.5 [OBS]: a truncated reply that streamed a tool_use goes on to its tools: no resumption, and its
    withheld error is never emitted."""
    session = new_session()
    fake.script(
        session,
        [
            reply(text("Let me look."), tool_use("toolu_cut", "Read", file_path="README.md"), stop_reason="max_tokens"),
            reply(text("It is a demo.")),
        ],
    )
    async with deployment.client() as client:
        await client.send_prompt(session, "What is in the README?")
        history = await wait_for(client, session, ended_with("It is a demo."))
    assert len(fake.requests(session)) == 2
    texts = [text_of(m) for m in live_messages(history)]
    assert OUTPUT_TOKEN_RECOVERY_MESSAGE not in texts
    assert not any(isinstance(m, AssistantMessage) and m.is_api_error_message for m in live_messages(history))
    assert_every_tool_use_answered_once(history)
    assert texts[-1] == "It is a demo."
