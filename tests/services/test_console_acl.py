"""deploy/redis/users.acl's ``console`` user is enough for every page and action of the console (issue 30),
and no more: it reads the bus, writes prompts, interrupts and answers to the ingress streams and replays dead
letters, and may not touch a ledger, the log's state or the approvals store."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import redis

from agentbus_redis.bus.events import UserPrompt
from agentbus_redis.bus.ledger import LedgerState
from agentbus_redis.config.settings import Settings
from agentbus_redis.console.app import build_console
from agentbus_redis.runtime import redis_client
from agentbus_redis.runtime.stream_admin import init_streams
from agentbus_redis.sdk.client import AgentbusClient
from agentbus_redis.streams.deadletter import DeadLetter
from agentbus_redis.streams.names import StreamNames, dead_letter_stream
from agentbus_redis.streams.topology import Topology
from agentbus_redis.workers.ingestion.ledger_cache import dump_state
from tests.services.acl_redis import AclRedis, start_acl_redis

pytestmark = pytest.mark.integration

TOPOLOGY = Topology(StreamNames(prefix="agentbus:", shards=8))
SESSION = "acl-console"
TOKEN = "acl-console-token"


@pytest.fixture(scope="module")
def acl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclRedis]:
    server = start_acl_redis(Path(tmp_path_factory.mktemp("acl-console-redis")))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def http(acl: AclRedis) -> AsyncIterator[httpx.AsyncClient]:
    """The console app connected as the ``console`` ACL user, the bus seeded by the operator."""
    operator = redis_client.connect(acl.url("operator"))
    await init_streams(operator, TOPOLOGY)
    shard = TOPOLOGY.names.shard_of(SESSION)
    now = int(time.time() * 1000)
    await operator.set(TOPOLOGY.ledger(SESSION), dump_state(LedgerState(session_id=SESSION, seq=1)))
    await operator.zadd(TOPOLOGY.sessions(shard), {SESSION: now})
    await operator.zadd(TOPOLOGY.session_state_index(shard, "ended"), {SESSION: now})
    ingress = TOPOLOGY.ingress_for(SESSION)
    fields = AgentbusClient(operator, TOPOLOGY)._ingress_fields(SESSION, "k-acl", UserPrompt(content="again"))
    letter = DeadLetter(
        stream=ingress, group="ingestion", entry_id="1-0", consumer="c", delivery_count=4, reason="handler_error",
        at_ms=now, fields=dict(fields),
    )  # fmt: skip
    await operator.xadd(dead_letter_stream(ingress), letter.to_stream_fields())  # type: ignore[arg-type]
    await operator.aclose()
    settings = Settings(_env_file=None, redis_url=acl.url("console"), console={"token": TOKEN})  # type: ignore[call-arg,arg-type]
    app = build_console(settings)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://console", headers={"Authorization": f"Bearer {TOKEN}"}
    ) as client:
        yield client


async def test_every_page_reads_as_the_console_user(http: httpx.AsyncClient) -> None:
    for path in (
        "/api/me",
        "/api/sessions",
        "/api/sessions?state=ended",
        "/api/sessions?state=running",
        f"/api/sessions?q={SESSION}",
        f"/api/sessions/{SESSION}",
        f"/api/sessions/{SESSION}/log",
        f"/api/sessions/{SESSION}/transcript",
        "/api/approvals",
        "/api/dead-letters",
        "/api/bus",
        "/readyz",
    ):
        reply = await http.get(path)
        assert reply.status_code == 200, (path, reply.text)
    assert (await http.get(f"/api/sessions/{SESSION}")).json()["agents"] == []  # the sub-agent tree, read
    listed = (await http.get("/api/sessions?state=ended")).json()["sessions"]
    assert [row["session_id"] for row in listed] == [SESSION]


async def test_every_action_writes_as_the_console_user(http: httpx.AsyncClient, acl: AclRedis) -> None:
    assert (await http.post(f"/api/sessions/{SESSION}/prompt", json={"text": "hello"})).status_code == 200
    assert (await http.post(f"/api/sessions/{SESSION}/interrupt", json={})).status_code == 200
    letters = (await http.get("/api/dead-letters")).json()  # one per seeding of the module's Redis
    before = acl.client("operator").xlen(TOPOLOGY.ingress_for(SESSION))
    replay = {"dlq_stream": letters[0]["dlq_stream"], "dlq_id": letters[0]["dlq_id"]}
    assert (await http.post("/api/dead-letters/replay", json=replay)).status_code == 200
    assert len((await http.get("/api/dead-letters")).json()) == len(letters) - 1
    assert acl.client("operator").xlen(TOPOLOGY.ingress_for(SESSION)) == before + 1


def test_the_console_user_may_not_write_state(acl: AclRedis) -> None:
    console = acl.client("console")
    log, live = TOPOLOGY.session_events(SESSION), TOPOLOGY.live_reply(SESSION)
    console.xread({log: "0-0", live: "0-0"}, count=1)  # the session page's stream
    for write in (
        lambda: console.set(TOPOLOGY.ledger(SESSION), "{}"),
        lambda: console.zadd(TOPOLOGY.sessions(0), {"x": 1}),
        lambda: console.xadd(TOPOLOGY.session_events(SESSION), {"data": "{}"}),
        lambda: console.hset("agentbus:tools:catalog", "w", "{}"),
        lambda: console.delete(TOPOLOGY.ledger(SESSION)),
    ):
        with pytest.raises(redis.exceptions.NoPermissionError):
            write()
