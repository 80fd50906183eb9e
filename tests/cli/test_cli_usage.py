"""``agentbus usage SESSION`` (M10.5) as a user runs it — its own process against a real Redis — and the
SDK's ``AgentbusClient.usage``: per-model rows, the total, the price table's date, ``--json``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from agentbus_redis.config.settings import Settings
from agentbus_redis.json_types import JsonObject
from agentbus_redis.model.cost import DEFAULT_PRICES
from agentbus_redis.sdk.client import AgentbusClient
from agentbus_redis.stores.usage import record_priced_usage, record_usage
from agentbus_redis.streams.topology import Topology
from tests.cli.process import agentbus, cli_env

pytestmark = pytest.mark.integration

TOPOLOGY = Topology(Settings(_env_file=None).names)
M10_2_USAGE: JsonObject = {
    "input_tokens": 1000,
    "output_tokens": 500,
    "cache_read_input_tokens": 20_000,
    "cache_creation_input_tokens": 5000,
    "cache_creation": {"ephemeral_5m_input_tokens": 5000, "ephemeral_1h_input_tokens": 0},
    "server_tool_use": {"web_search_requests": 0, "web_fetch_requests": 0},
}


async def record_session(redis: aioredis.Redis, session: str) -> None:
    for request_id in ("req_1", "req_2"):
        await record_priced_usage(
            redis,
            TOPOLOGY,
            session,
            model="claude-sonnet-4-5-20250929",
            usage=M10_2_USAGE,
            prices=DEFAULT_PRICES,
            request_id=request_id,
        )
    one_hour: JsonObject = {"cache_creation": {"ephemeral_1h_input_tokens": 2000}, "output_tokens": 10}
    await record_priced_usage(redis, TOPOLOGY, session, model="claude-haiku-4-5", usage=one_hour, prices=DEFAULT_PRICES)
    await record_priced_usage(redis, TOPOLOGY, session, model="claude-opus-4-9", usage=one_hour, prices=DEFAULT_PRICES)


async def test_m10_5_usage_table_per_model_with_total_and_price_date(
    redis_url: str, aredis: aioredis.Redis, tmp_path: Path
) -> None:
    await record_session(aredis, "cost-1")
    outcome = agentbus("usage", "cost-1", cwd=tmp_path, env=cli_env(redis_url))
    assert outcome.code == 0, outcome.stderr
    lines = outcome.stdout.splitlines()
    assert lines[0] == "session cost-1"
    assert lines[1].split() == [
        "model", "requests", "input", "output", "cache", "write", "5m", "cache", "write", "1h", "cache", "read",
        "cost", "(USD)",
    ]  # fmt: skip
    rows = {line.split()[0]: line.split()[1:] for line in lines[2:6]}
    # M10.2 twice: 2 × $0.03525; Haiku 4.5: 2 000 × $2 + 10 × $5 per MTok = $0.00405.
    assert rows["claude-sonnet-4-5-20250929"] == ["2", "2,000", "1,000", "10,000", "0", "40,000", "0.070500"]
    assert rows["claude-haiku-4-5"] == ["1", "0", "10", "0", "2,000", "0", "0.004050"]
    assert rows["claude-opus-4-9"] == ["1", "0", "10", "0", "2,000", "0", "0.000000*"]
    assert rows["total"] == ["4", "2,000", "1,020", "10,000", "4,000", "40,000", "0.074550*"]
    assert lines[6:] == [
        "* 1 call(s) of claude-opus-4-9 had no price in the price table (counted as $0)",
        "priced with the price table of 2026-11-25 (4 calls)",
    ]


async def test_m10_5_usage_json_is_the_sdk_object(redis_url: str, aredis: aioredis.Redis, tmp_path: Path) -> None:
    await record_session(aredis, "cost-2")
    outcome = agentbus("usage", "cost-2", "--json", cwd=tmp_path, env=cli_env(redis_url))
    assert outcome.code == 0, outcome.stderr
    printed = json.loads(outcome.stdout)
    async with AgentbusClient.connect(redis_url) as bus:
        usage = await bus.usage("cost-2")
    assert printed == json.loads(usage.model_dump_json())
    assert printed["total"]["requests"] == 4
    assert printed["models"]["claude-sonnet-4-5-20250929"]["cost_usd"] == 0.0705
    assert printed["price_tables"] == {"2026-11-25": 4}


async def test_usage_of_a_session_never_seen_fails_in_one_line(redis_url: str, tmp_path: Path) -> None:
    outcome = agentbus("usage", "nobody", cwd=tmp_path, env=cli_env(redis_url))
    assert outcome.code == 1
    assert outcome.error_line == f"agentbus: no session 'nobody' on {redis_url}"


async def test_usage_of_a_known_session_without_model_calls(
    redis_url: str, aredis: aioredis.Redis, tmp_path: Path
) -> None:
    await aredis.zadd(TOPOLOGY.sessions(TOPOLOGY.names.shard_of("quiet")), {"quiet": 1})
    outcome = agentbus("usage", "quiet", cwd=tmp_path, env=cli_env(redis_url))
    assert (outcome.code, outcome.stdout.splitlines()) == (0, ["session quiet", "no model calls recorded"])


async def test_usage_of_an_invalid_session_id_is_a_usage_error(redis_url: str, tmp_path: Path) -> None:
    outcome = agentbus("usage", "bad id!", cwd=tmp_path, env=cli_env(redis_url))
    assert outcome.code == 2
    assert "invalid session id" in outcome.stderr


async def test_web_searches_are_noted(redis_url: str, aredis: aioredis.Redis, tmp_path: Path) -> None:
    usage: JsonObject = {"server_tool_use": {"web_search_requests": 3, "web_fetch_requests": 1}}
    await record_usage(aredis, TOPOLOGY, "searching", model="claude-sonnet-4-6", usage=usage, cost_usd=0.03)
    outcome = agentbus("usage", "searching", cwd=tmp_path, env=cli_env(redis_url))
    assert "server tools: 3 web searches (in the cost), 1 web fetches" in outcome.stdout.splitlines()
