"""deploy/redis/users.acl covers the live reply stream (bus/live_reply.py): ingestion writes it, a producer
(``agentbus chat``, ``bus.converse``) reads it together with the session's log and the shard's tool
deadlines, and may not write it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from agentbus_redis.bus.live_reply import LIVE_REPLY_MAXLEN, LIVE_REPLY_TTL_MS
from agentbus_redis.streams.names import StreamNames
from agentbus_redis.streams.topology import INGESTION_GROUP, Topology
from tests.services.acl_redis import AclRedis, start_acl_redis

pytestmark = pytest.mark.integration

TOPOLOGY = Topology(StreamNames(prefix="agentbus:", shards=8))
SESSION = "acl-live"


@pytest.fixture(scope="module")
def acl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclRedis]:
    server = start_acl_redis(Path(tmp_path_factory.mktemp("acl-live-redis")))
    try:
        yield server
    finally:
        server.stop()


def test_ingestion_writes_the_live_stream_and_a_producer_reads_it_with_the_log(acl: AclRedis) -> None:
    live, log = TOPOLOGY.live_reply(SESSION), TOPOLOGY.session_events(SESSION)
    ingestion = acl.client("ingestion")
    ingestion.xadd(live, {"data": "{}"}, maxlen=LIVE_REPLY_MAXLEN, approximate=True)
    ingestion.pexpire(live, LIVE_REPLY_TTL_MS)
    ingestion.xadd(log, {"data": "{}"})
    producer = acl.client("producer")
    rows: Any = producer.xread({log: "0-0", live: "0-0"}, count=10)
    assert sorted(stream.decode() for stream, _ in rows) == sorted([log, live])
    assert producer.xrevrange(live, count=1)
    assert producer.zscore(TOPOLOGY.deadlines(TOPOLOGY.names.shard_of(SESSION)), SESSION) is None
    with pytest.raises(redis.exceptions.NoPermissionError):
        producer.xadd(live, {"data": "{}"})


def test_a_producer_sees_whether_ingestion_applied_its_interrupt(acl: AclRedis) -> None:
    """``Conversation.interrupt``: the ingestion group's progress and pending entries on the session's shard."""
    ingress = TOPOLOGY.ingress_for(SESSION)
    acl.client("ingestion").xgroup_create(ingress, INGESTION_GROUP, id="0", mkstream=True)
    producer = acl.client("producer")
    entry_id = producer.xadd(ingress, {"data": "{}"})
    (group,) = producer.xinfo_groups(ingress)
    assert group["name"].decode() == INGESTION_GROUP
    assert producer.xpending_range(ingress, INGESTION_GROUP, min=entry_id, max=entry_id, count=1) == []
