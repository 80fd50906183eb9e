"""An approval listed as pending is found by its id (stores/approvals.py ``put_park``).

The full suite once failed ``test_h_approval_round_trip_under_the_deploy_acl`` under a load of 10: the producer
listed the pending approval, then ``bus.approval(id)`` answered ``None``. ``put_park`` added it to the pending
index before the id → session map ``show`` reads: a person (or ``agentbus approvals``) who listed and then looked
it up in between saw it vanish. The map is now written with the record, before the index.
"""

from __future__ import annotations

import asyncio

from agentbus_redis.approvals.records import ApprovalRequest
from agentbus_redis.runtime import redis_client
from agentbus_redis.stores.approvals import ApprovalStore
from agentbus_redis.streams.names import StreamNames
from agentbus_redis.streams.topology import Topology

PARKS = 60


def _request(number: int) -> ApprovalRequest:
    return ApprovalRequest(
        approval_id=f"apr_order_{number}",
        session_id=f"order-{number}",
        tool_name="Bash",
        input={"command": "true"},
        tool_use_id=f"toolu_order_{number}",
        request_message="Run true?",
        assistant_uuid=f"assistant-{number}",
        requested_ms=1_000 + number,
        deadline_ms=600_000 + number,
    )


async def test_every_approval_listed_as_pending_is_found_by_its_id(redis_url: str) -> None:
    topology = Topology(StreamNames(prefix="order:", shards=1))
    writer, reader = redis_client.connect(redis_url), redis_client.connect(redis_url)
    store, lister = ApprovalStore(writer, topology), ApprovalStore(reader, topology)
    parked = asyncio.Event()
    listed: set[str] = set()
    vanished: list[str] = []

    async def list_and_look_up() -> None:
        # The newest member of the pending index, looked up at once (what ``approvals ls`` then ``show`` do, with
        # the least time between the two): the window between the index and the id map is one round trip.
        while not parked.is_set():
            rows: list[bytes] = await reader.zrange(lister.pending_index(0), -1, -1)  # type: ignore[assignment]
            for member in rows:
                approval_id = member.decode().split(" ", 1)[1]
                if approval_id not in listed:
                    listed.add(approval_id)
                    if await lister.find(approval_id) is None:
                        vanished.append(approval_id)

    looking = asyncio.create_task(list_and_look_up())
    try:
        for number in range(PARKS):
            request = _request(number)
            await store.put_park(request.session_id, f"park-{number}", [request], [request.tool_use_id])
            await asyncio.sleep(0)
        parked.set()
        await looking
    finally:
        await writer.aclose()
        await reader.aclose()
    assert listed, "the lister saw no approval pending: the race was not exercised"
    assert vanished == [], f"listed as pending, then not found by id: {vanished}"
