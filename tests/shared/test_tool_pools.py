"""Issue 29, routing by tool: which pool each call of a reply goes to (tools/pools.py)."""

from __future__ import annotations

import pytest

from agentbus_redis.messages.content import ToolUseBlock
from agentbus_redis.tools.catalog import CatalogEntry
from agentbus_redis.tools.definitions import ToolDefinition
from agentbus_redis.tools.pools import DEFAULT_POOL, ToolRoutes, pool_name_problem, split_by_pool, tool_routes

SCHEMA = {"type": "object", "properties": {}}


def entry(worker: str, pool: str, *names: str, expires_ms: int = 1000) -> CatalogEntry:
    tools = [ToolDefinition(name=name, input_schema=SCHEMA) for name in names]
    return CatalogEntry(worker=worker, refreshed_ms=0, expires_ms=expires_ms, tools=tools, pool=pool)


def call(tool_id: str, name: str) -> ToolUseBlock:
    return ToolUseBlock(id=tool_id, name=name, input={})


def test_an_entry_written_before_pools_serves_the_default_pool() -> None:
    legacy = CatalogEntry.model_validate({"worker": "w", "refreshed_ms": 0, "expires_ms": 9, "tools": []})
    assert legacy.pool == DEFAULT_POOL


def test_each_tool_goes_to_the_pool_that_offers_it() -> None:
    routes = tool_routes([entry("a", "default", "Read", "Bash"), entry("b", "weather", "Forecast")], now_ms=10)
    assert (routes.pool_of("Read"), routes.pool_of("Forecast")) == ("default", "weather")
    assert routes.live_pools == {"default", "weather"}


def test_a_tool_of_several_pools_goes_to_the_first_by_name_whatever_the_order() -> None:
    one, two = entry("a", "zeta", "Lookup"), entry("b", "alpha", "Lookup")
    assert tool_routes([one, two], now_ms=10).pool_of("Lookup") == "alpha"
    assert tool_routes([two, one], now_ms=10).pool_of("Lookup") == "alpha"


def test_expired_entries_route_nothing() -> None:
    routes = tool_routes([entry("dead", "weather", "Forecast", expires_ms=5), entry("a", "default", "Read")], now_ms=10)
    assert "Forecast" not in routes.pool_of_tool
    assert routes.live_pools == {"default"}


def test_a_tool_nobody_offers_goes_where_a_live_worker_answers_it() -> None:
    """The default pool when it is live, else the first live pool; with no live pool at all, the default pool
    (its jobs wait for a worker)."""
    assert tool_routes([entry("a", "default", "Read"), entry("b", "x", "X")], now_ms=1).pool_of("Nope") == "default"
    assert tool_routes([entry("b", "x", "X"), entry("c", "b-team", "B")], now_ms=1).pool_of("Nope") == "b-team"
    assert ToolRoutes().pool_of("Read") == DEFAULT_POOL


def test_split_keeps_the_call_order_within_each_pool_and_pools_in_first_call_order() -> None:
    routes = tool_routes([entry("a", "default", "Read", "Bash"), entry("b", "weather", "Forecast")], now_ms=1)
    calls = [call("1", "Forecast"), call("2", "Read"), call("3", "Forecast"), call("4", "Bash"), call("5", "Nope")]
    assert [(pool, [c.id for c in share]) for pool, share in split_by_pool(calls, routes)] == [
        ("weather", ["1", "3"]),
        ("default", ["2", "4", "5"]),
    ]
    assert split_by_pool([], routes) == []


@pytest.mark.parametrize("name", ["default", "weather", "team-a_1", "0"])
def test_pool_names_that_fit_in_stream_names(name: str) -> None:
    assert pool_name_problem(name) is None


@pytest.mark.parametrize("name", ["", "Weather", "a:b", "a{b}", "-x", "x" * 33, "dlq", "a b"])
def test_pool_names_refused(name: str) -> None:
    assert pool_name_problem(name) is not None
