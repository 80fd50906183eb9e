"""The tool catalog's merge (issue 18: the tools offered are the ones some live tool worker can run)."""

from __future__ import annotations

from agentbus_redis.tools.catalog import CatalogEntry, merge_catalog
from agentbus_redis.tools.definitions import ToolDefinition

SCHEMA = {"type": "object", "properties": {}}


def tool(name: str, description: str = "") -> ToolDefinition:
    return ToolDefinition(name=name, description=description, input_schema=SCHEMA)


def entry(worker: str, refreshed_ms: int, *tools: ToolDefinition, ttl_ms: int = 1000) -> CatalogEntry:
    return CatalogEntry(worker=worker, refreshed_ms=refreshed_ms, expires_ms=refreshed_ms + ttl_ms, tools=list(tools))


def test_union_of_live_entries_sorted_by_name() -> None:
    merged = merge_catalog(
        [entry("w1", 100, tool("Read"), tool("Bash")), entry("w2", 100, tool("Agent"), tool("Read"))], now_ms=500
    )
    assert [definition.name for definition in merged] == ["Agent", "Bash", "Read"]


def test_expired_entries_are_ignored() -> None:
    merged = merge_catalog([entry("dead", 0, tool("Bash")), entry("live", 900, tool("Read"))], now_ms=1000)
    assert [definition.name for definition in merged] == ["Read"]
    assert merge_catalog([entry("w", 0, tool("Read"), ttl_ms=1000)], now_ms=1000) == []  # expiry is exclusive


def test_most_recently_refreshed_definition_wins() -> None:
    old, new = tool("Read", "v1"), tool("Read", "v2")
    for entries in ([entry("a", 100, old), entry("b", 200, new)], [entry("b", 200, new), entry("a", 100, old)]):
        assert merge_catalog(entries, now_ms=300) == [new]


def test_equal_refresh_times_pick_the_same_definition_on_every_reader() -> None:
    first, second = entry("a", 100, tool("Read", "from a")), entry("b", 100, tool("Read", "from b"))
    assert merge_catalog([first, second], now_ms=150) == merge_catalog([second, first], now_ms=150)


def test_entry_round_trips_unknown_fields() -> None:
    raw = '{"worker":"w","refreshed_ms":1,"expires_ms":2,"tools":[],"host":"pod-1"}'
    assert CatalogEntry.model_validate_json(raw).to_wire_json() == raw
