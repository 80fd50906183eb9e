"""Issue 15, phantom lag: after an AOF rewrite and a restart, Redis 7.0's ``XINFO GROUPS`` reports ``lag > 0``
forever for groups that read and acked everything. "Drained" is decided from last-delivered-id against the
stream's last-generated-id and the pending list (``agentbus_redis.streams.drain.group_drained``), by replay's wait
and ``agentbus streams info``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from agentbus_redis.config.settings import Settings
from agentbus_redis.local.redis_server import LocalRedis, start_local_redis
from agentbus_redis.sdk.client import AgentbusClient
from agentbus_redis.sdk.replay import wait_until_persisted
from agentbus_redis.streams.drain import GroupPosition, group_drained, group_positions, stream_progress
from agentbus_redis.streams.names import StreamNames
from agentbus_redis.streams.topology import INGESTION_GROUP, NORMALIZATION_GROUP, TRANSCRIPTS_GROUP, Topology

pytestmark = pytest.mark.integration

SHARDS = 4
SESSION = "phantom-lag-session"
NAMES = StreamNames(prefix="agentbus:", shards=SHARDS)


def _read_and_ack(client: redis.Redis, stream: str, group: str) -> None:
    reply = client.xreadgroup(group, "consumer-1", {stream: ">"}, count=1000)
    client.xack(stream, group, *[entry_id for entry_id, _ in reply[0][1]])


def _rewrite_aof(client: redis.Redis) -> None:
    client.bgrewriteaof()
    while True:
        info = client.info("persistence")
        if not info["aof_rewrite_in_progress"] and not info["aof_rewrite_scheduled"]:
            return
        time.sleep(0.02)


@pytest.fixture
def phantom_redis(tmp_path: Path) -> Iterator[LocalRedis]:
    """A private AOF Redis where the session's ingress and log shards were read and acked completely across
    an AOF rewrite, then restarted: the sequence that leaves Redis 7.0 reporting phantom lag."""
    server = start_local_redis(tmp_path / "redis", appendonly=True)
    try:
        topology = Topology(NAMES)
        streams = {
            topology.ingress_for(SESSION): [INGESTION_GROUP],
            topology.log_for(SESSION): [NORMALIZATION_GROUP, TRANSCRIPTS_GROUP],
        }
        client = redis.Redis.from_url(server.url)
        for stream, groups in streams.items():
            for group in groups:
                client.xgroup_create(stream, group, id="0", mkstream=True)
        for round_number in range(2):
            for stream, groups in streams.items():
                for index in range(3):
                    client.xadd(stream, {"data": f"{round_number}-{index}"})
                for group in groups:
                    _read_and_ack(client, stream, group)
            if round_number == 0:
                _rewrite_aof(client)
        client.close()
        server.restart()
        client = redis.Redis.from_url(server.url)
        lags = [row["lag"] for stream in streams for row in client.xinfo_groups(stream)]
        pending = [row["pending"] for stream in streams for row in client.xinfo_groups(stream)]
        client.close()
        if not all(lag and lag > 0 for lag in lags):
            pytest.skip(f"this redis-server does not report phantom lag after an AOF rewrite (lags {lags})")
        assert pending == [0, 0, 0]
        yield server
    finally:
        server.stop()


def _settings(server: LocalRedis, tmp_path: Path) -> Settings:
    return Settings(redis_url=server.url, data_dir=tmp_path / "data", shards=SHARDS)


async def test_replay_wait_is_not_fooled_by_phantom_lag(phantom_redis: LocalRedis, tmp_path: Path) -> None:
    async with AgentbusClient.connect(phantom_redis.url, names=NAMES) as bus:
        progress = await stream_progress(bus.redis, bus.topology.log_for(SESSION))
        assert progress is not None
        assert progress.drained(NORMALIZATION_GROUP)
        assert progress.drained(TRANSCRIPTS_GROUP)
        settings = _settings(phantom_redis, tmp_path)
        await wait_until_persisted(bus, SESSION, settings=settings, timeout_s=5, wait_all=True)

        await bus.redis.xadd(bus.topology.log_for(SESSION), {"data": "not read yet"})
        with pytest.raises(TimeoutError, match="has not settled"):
            await wait_until_persisted(bus, SESSION, settings=settings, timeout_s=0.3, wait_all=True)


def _streams_info(server: LocalRedis) -> list[dict[str, object]]:
    env = {**os.environ, "REDIS_URL": server.url, "AGENTBUS_SHARDS": str(SHARDS)}
    done = subprocess.run(
        [sys.executable, "-m", "agentbus_redis.cli.main", "streams", "info", "--json"],
        env=env,
        capture_output=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    rows: list[dict[str, object]] = json.loads(done.stdout)
    return rows


def test_streams_info_reports_no_lag_for_drained_groups(phantom_redis: LocalRedis) -> None:
    topology = Topology(NAMES)
    watched = {topology.ingress_for(SESSION), topology.log_for(SESSION)}
    rows = [row for row in _streams_info(phantom_redis) if row["stream"] in watched]
    assert len(rows) == 3
    for row in rows:
        assert row["lag"] == 0, row
        assert row["drained"] is True, row
        assert isinstance(row["redis_lag"], int)
        assert row["redis_lag"] > 0

    client = redis.Redis.from_url(phantom_redis.url)
    client.xadd(topology.ingress_for(SESSION), {"data": "new"})
    client.close()
    (ingress,) = [row for row in _streams_info(phantom_redis) if row["stream"] == topology.ingress_for(SESSION)]
    assert ingress["drained"] is False
    assert isinstance(ingress["lag"], int)
    assert ingress["lag"] > 0


# Replies captured from redis-server 7.0.15 after the sequence of ``phantom_redis`` (XADD, XREADGROUP, XACK,
# BGREWRITEAOF, more of the same, restart): lag 3 with nothing pending and last-delivered == last-generated.
CAPTURED_GROUPS = [
    {
        b"name": b"g",
        b"consumers": 1,
        b"pending": 0,
        b"last-delivered-id": b"1795577580075-0",
        b"entries-read": 3,
        b"lag": 3,
    }
]
CAPTURED_LAST_GENERATED = "1795577580075-0"


def test_group_drained_decides_from_ids_not_lag_on_a_captured_reply() -> None:
    positions = group_positions([{key.decode(): value for key, value in row.items()} for row in CAPTURED_GROUPS], {})
    assert group_drained(positions["g"], upto=CAPTURED_LAST_GENERATED)


@pytest.mark.parametrize(
    ("position", "upto", "drained"),
    [
        (GroupPosition("1000-5", None), "1000-5", True),
        (GroupPosition("1000-5", None), "1000-6", False),  # an entry not delivered yet
        (GroupPosition("1000-5", "1000-2"), "1000-5", False),  # delivered, not acked
        (GroupPosition("1000-5", "1000-4"), "1000-3", True),  # pending only after the id waited for
        (GroupPosition("999-9", None), "1000-0", False),
        (GroupPosition("1001-0", None), "1000-9", True),
    ],
)
def test_group_drained_cases(position: GroupPosition, upto: str, drained: bool) -> None:
    assert group_drained(position, upto=upto) is drained
