"""M8.1 and the gated M8.5 escalation with real workers and the fake server: this module's model worker runs
with a small pre-flight blocking limit (``AGENTBUS_MODEL__BLOCKING_LIMIT_OVERRIDE``, M8.1's
``CLAUDE_CODE_BLOCKING_LIMIT_OVERRIDE``) and the capped default (``AGENTBUS_MODEL__CAPPED_DEFAULT_MAX_TOKENS``,
M1.5's gate ``tengu_otk_slot_v1``: 8 000, escalated once to 64 000)."""

from __future__ import annotations

import json
import uuid

import pytest

from agentbus_redis.messages.kinds import AssistantMessage
from agentbus_redis.model.error_texts import PROMPT_TOO_LONG
from agentbus_redis.model.limits.max_tokens import CAPPED_DEFAULT_MAX_TOKENS, ESCALATED_MAX_TOKENS
from agentbus_redis.model.limits.window import OUTPUT_TOKEN_RECOVERY_MESSAGE
from tests.integration.cluster import WorkerCluster
from tests.integration.fake_model import FakeModelProcess
from tests.integration.model_turns import (
    ended_with,
    live_messages,
    reply,
    text,
    text_of,
    tombstones,
    turn_ended,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

BLOCKING_LIMIT = 3_000
"""Estimated prompt tokens (chars / 4) at which the worker stops sending."""


@pytest.fixture(scope="module")
def deployment(module_cluster: WorkerCluster, fake: FakeModelProcess) -> WorkerCluster:
    module_cluster.extra_env.update(
        {
            "ANTHROPIC_API_KEY": "sk-ant-test",
            "AGENTBUS_MODEL__BASE_URL": fake.base_url,
            "AGENTBUS_MODEL__MODEL": "claude-sonnet-4-6",
            "AGENTBUS_MODEL__BLOCKING_LIMIT_OVERRIDE": str(BLOCKING_LIMIT),
            "AGENTBUS_MODEL__CAPPED_DEFAULT_MAX_TOKENS": "true",
        }
    )
    for name in ("ingestion", "normalization", "transcripts", "model"):
        module_cluster.start(name)
    module_cluster.wait_ready(timeout_s=240)
    return module_cluster


def new_session() -> str:
    return f"limits-{uuid.uuid4().hex[:10]}"


async def test_m8_1_a_prompt_over_the_blocking_limit_is_not_sent(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    """M8.1: estimated tokens ≥ the blocking limit → no request; the assistant error ``Prompt is too long``
    (invalid_request) ends the turn."""
    session = new_session()
    async with deployment.client() as client:
        await client.send_prompt(session, "word " * (BLOCKING_LIMIT * 4 // 5))  # ≈ BLOCKING_LIMIT tokens of text
        history = await wait_for(client, session, turn_ended)
    assert fake.requests(session) == []
    (error,) = [m for m in live_messages(history) if isinstance(m, AssistantMessage)]
    assert text_of(error) == PROMPT_TOO_LONG
    assert error.is_api_error_message
    assert error.error == "invalid_request"
    assert error.message.model == "<synthetic>"


async def test_m8_5_escalation_reissues_the_cut_request_once_with_64k(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    """M8.5 (gated): the first cut reply is re-issued as the same request with ``max_tokens`` 64 000 — no meta
    message; the cut reply is tombstoned, its error never logged, the log keeps one answer."""
    session = new_session()
    cut = reply(text("Cut"), text("short"), stop_reason="max_tokens")
    fake.script(session, [cut, reply(text("The whole answer."))])
    async with deployment.client() as client:
        await client.send_prompt(session, "Write a lot.")
        history = await wait_for(client, session, ended_with("The whole answer."))
    first, second = fake.requests(session)
    assert (first["body"]["max_tokens"], second["body"]["max_tokens"]) == (
        CAPPED_DEFAULT_MAX_TOKENS,
        ESCALATED_MAX_TOKENS,
    )
    assert second["body"]["messages"] == first["body"]["messages"]  # the same request
    # The first block was logged and is retracted; the last one was still held back (never logged).
    assert [text_of(t.message) for t in tombstones(history)] == ["Cut"]
    replies = [m for m in live_messages(history) if isinstance(m, AssistantMessage)]
    assert [text_of(m) for m in replies] == ["The whole answer."]
    assert OUTPUT_TOKEN_RECOVERY_MESSAGE not in [text_of(m) for m in live_messages(history)]


async def test_m8_5_a_cut_after_the_escalation_resumes_and_keeps_the_override(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    """M8.5/M8.6: one escalation per turn; the 64 000 reply cut again is resumed (meta message), and the
    resumption is sent with the loop override (M1.5 precedence)."""
    session = new_session()
    fake.script(
        session,
        [
            reply(text("Cut short"), stop_reason="max_tokens"),
            reply(text("Longer, still cut"), stop_reason="max_tokens"),
            reply(text("and the end.")),
        ],
    )
    async with deployment.client() as client:
        await client.send_prompt(session, "Write even more.")
        history = await wait_for(client, session, ended_with("and the end."))
    requests = fake.requests(session)
    assert [r["body"]["max_tokens"] for r in requests] == [
        CAPPED_DEFAULT_MAX_TOKENS,
        ESCALATED_MAX_TOKENS,
        ESCALATED_MAX_TOKENS,
    ]
    assert OUTPUT_TOKEN_RECOVERY_MESSAGE in json.dumps(requests[2]["body"]["messages"][-1], ensure_ascii=False)
    texts = [text_of(m) for m in live_messages(history)]
    assert texts[1:] == ["Longer, still cut", OUTPUT_TOKEN_RECOVERY_MESSAGE, "and the end."]
    assert not any(isinstance(m, AssistantMessage) and m.is_api_error_message for m in live_messages(history))
