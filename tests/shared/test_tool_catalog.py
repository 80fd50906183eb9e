"""The tool catalog's merge (issue 18: the tools offered are the ones some live tool worker can run)."""

from __future__ import annotations

from agentbus_redis.tools.catalog import CatalogEntry, HeldEntry, hold_recently_live, merge_catalog, merge_tools
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


def test_an_entry_seen_live_is_held_from_the_first_read_that_misses_it() -> None:
    """Issue 25: a Redis outage longer than the TTL expires every entry (or a restart loses the hash) while the
    workers are alive; they write their entries again within a refresh interval, and a reader holds what it
    saw live that long (counted from its first read after the outage, however long that was)."""
    a, b = entry("a", 0, tool("Bash"), ttl_ms=1000), entry("b", 0, tool("Read"), ttl_ms=1000)
    held = hold_recently_live({}, [a, b], now_ms=500, hold_ms=2000)
    assert held == {"a": HeldEntry(a), "b": HeldEntry(b)}
    held = hold_recently_live(held, [], now_ms=60_000, hold_ms=2000)  # a minute's outage: both missing, held
    assert held == {"a": HeldEntry(a, 60_000), "b": HeldEntry(b, 60_000)}
    assert merge_tools(seen.entry for seen in held.values()) == [tool("Bash"), tool("Read")]
    a_again = entry("a", 60_500, tool("Bash"), ttl_ms=1000)
    held = hold_recently_live(held, [a_again], now_ms=61_000, hold_ms=2000)  # a is back
    assert held == {"a": HeldEntry(a_again), "b": HeldEntry(b, 60_000)}
    held = hold_recently_live(held, [a_again], now_ms=62_000, hold_ms=2000)  # b missing for the whole hold
    assert held == {"a": HeldEntry(a_again)}


def test_without_a_hold_time_a_reader_offers_only_what_is_live() -> None:
    live = entry("a", 0, tool("Bash"))
    assert hold_recently_live({"b": HeldEntry(entry("b", 0, tool("Read")))}, [live], now_ms=10, hold_ms=0) == {
        "a": HeldEntry(live)
    }
