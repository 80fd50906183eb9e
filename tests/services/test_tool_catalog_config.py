"""The tool catalog's timing settings: an entry must outlive the interval between two of its refreshes."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agentbus_redis.config.settings import ToolSettings
from agentbus_redis.stores.tool_catalog import ToolCatalogPublisher
from agentbus_redis.streams.names import StreamNames
from agentbus_redis.streams.topology import Topology


def test_catalog_ttl_must_exceed_the_refresh_interval() -> None:
    with pytest.raises(ValidationError, match="catalog_ttl_s"):
        ToolSettings(catalog_refresh_s=10, catalog_ttl_s=10)
    assert ToolSettings().catalog_ttl_s > ToolSettings().catalog_refresh_s
    topology = Topology(StreamNames(prefix="agentbus:", shards=1))
    with pytest.raises(ValueError, match="must exceed the refresh interval"):
        ToolCatalogPublisher(None, topology, worker="w", tools=[], refresh_s=5, ttl_s=5)  # type: ignore[arg-type]
