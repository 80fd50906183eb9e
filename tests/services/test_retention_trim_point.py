"""The trim point of a work stream (``workers/retention.py``, ecosystem.md P6): pure cases."""

from __future__ import annotations

from agentbus_redis.streams.drain import GroupPosition
from agentbus_redis.streams.names import StreamNames
from agentbus_redis.streams.topology import Topology
from agentbus_redis.workers.retention import TrimTarget, trim_point, work_streams

NOW = 10_000_000


def test_every_group_acked_everything_trims_through_the_slowest_last_delivered() -> None:
    positions = {"a": GroupPosition("900-3", None), "b": GroupPosition("700-0", None)}
    assert trim_point(positions, ["a", "b"], now_ms=NOW, keep_acked_ms=0) == "700-1"


def test_a_pending_entry_is_never_trimmed() -> None:
    positions = {"a": GroupPosition("900-3", "500-2"), "b": GroupPosition("950-0", None)}
    assert trim_point(positions, ["a", "b"], now_ms=NOW, keep_acked_ms=0) == "500-2"


def test_a_missing_group_means_no_trim() -> None:
    """The group will be created at id 0 and must read everything."""
    assert trim_point({"a": GroupPosition("900-3", None)}, ["a", "b"], now_ms=NOW, keep_acked_ms=0) is None


def test_recent_entries_are_kept_for_the_retention_window() -> None:
    positions = {"a": GroupPosition(f"{NOW}-0", None)}
    assert trim_point(positions, ["a"], now_ms=NOW, keep_acked_ms=3_600_000) == f"{NOW - 3_600_000}-0"


def test_nothing_delivered_yet_trims_nothing() -> None:
    assert trim_point({"a": GroupPosition("0-0", None)}, ["a"], now_ms=NOW, keep_acked_ms=0) is None


def test_a_group_a_team_added_holds_the_stream_back_too() -> None:
    """An analytics reader on the log loses nothing it has not read and acknowledged."""
    positions = {"a": GroupPosition("900-0", None), "analytics": GroupPosition("400-7", None)}
    assert trim_point(positions, ["a"], now_ms=NOW, keep_acked_ms=0) == "400-8"


def test_work_streams_are_the_queues_not_the_records() -> None:
    """Ingress, log and tool-job shards; never a session's event stream, requests or a DLQ."""
    topology = Topology(StreamNames(prefix="t:", shards=2))
    assert work_streams(topology) == [
        TrimTarget("t:{s00-1}:ingress", ("ingestion",)),
        TrimTarget("t:{s01-22}:ingress", ("ingestion",)),
        TrimTarget("t:{s00-1}:log", ("normalization", "transcripts")),
        TrimTarget("t:{s01-22}:log", ("normalization", "transcripts")),
        TrimTarget("t:{s00-1}:tools:jobs", ("tools",)),
        TrimTarget("t:{s01-22}:tools:jobs", ("tools",)),
    ]


def test_a_tool_pools_job_streams_are_work_streams_of_its_workers() -> None:
    """Issue 29: a worker of pool ``weather`` trims that pool's job streams (as the default pool's are)."""
    topology = Topology(StreamNames(prefix="t:", shards=2))
    tool_jobs = [target for target in work_streams(topology, tool_pools=["weather"]) if target.groups == ("tools",)]
    assert tool_jobs == [
        TrimTarget("t:{s00-1}:tools:jobs", ("tools",)),
        TrimTarget("t:{s01-22}:tools:jobs", ("tools",)),
        TrimTarget("t:{s00-1}:tools:pool:weather:jobs", ("tools",)),
        TrimTarget("t:{s01-22}:tools:pool:weather:jobs", ("tools",)),
    ]
