"""State the workers keep in Redis beside the streams: approvals, tool catalog, usage, prices, rate limits."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentbus_redis.lazy_facade import lazy_facade

if TYPE_CHECKING:
    from agentbus_redis.stores.approvals import (
        DECIDED_TTL_MS,
        EVENTS_MAXLEN,
        ApprovalStore,
        StoredApproval,
        fold_permission_updates,
    )
    from agentbus_redis.stores.price_table import PriceTableError, load_price_table, read_price_file
    from agentbus_redis.stores.token_bucket import DEFAULT_TENANT, BoundBy, Reservation, TokenBucket, rate_limit_key
    from agentbus_redis.stores.tool_catalog import (
        DEFAULT_REFRESH_S,
        DEFAULT_TTL_S,
        CatalogSnapshot,
        InvalidCatalogEntry,
        ToolCatalogCache,
        ToolCatalogPublisher,
        catalog_reader,
        log,
        prune_expired,
        read_catalog_snapshot,
        read_tool_catalog,
    )
    from agentbus_redis.stores.usage import (
        DEFAULT_DEDUPE_WINDOW_S,
        MODEL_FIELD_PREFIX,
        PRICES_FIELD_PREFIX,
        UPDATED_FIELD,
        model_field,
        read_usage,
        record_model_usage,
        record_priced_usage,
        record_usage,
        seen_key,
        usage_from_hash,
    )

__all__ = [
    "DECIDED_TTL_MS",
    "DEFAULT_DEDUPE_WINDOW_S",
    "DEFAULT_REFRESH_S",
    "DEFAULT_TENANT",
    "DEFAULT_TTL_S",
    "EVENTS_MAXLEN",
    "MODEL_FIELD_PREFIX",
    "PRICES_FIELD_PREFIX",
    "UPDATED_FIELD",
    "ApprovalStore",
    "BoundBy",
    "CatalogSnapshot",
    "InvalidCatalogEntry",
    "PriceTableError",
    "Reservation",
    "StoredApproval",
    "TokenBucket",
    "ToolCatalogCache",
    "ToolCatalogPublisher",
    "catalog_reader",
    "fold_permission_updates",
    "load_price_table",
    "log",
    "model_field",
    "prune_expired",
    "rate_limit_key",
    "read_catalog_snapshot",
    "read_price_file",
    "read_tool_catalog",
    "read_usage",
    "record_model_usage",
    "record_priced_usage",
    "record_usage",
    "seen_key",
    "usage_from_hash",
]

_MODULE_OF = {
    "ApprovalStore": "approvals",
    "BoundBy": "token_bucket",
    "CatalogSnapshot": "tool_catalog",
    "DECIDED_TTL_MS": "approvals",
    "DEFAULT_DEDUPE_WINDOW_S": "usage",
    "DEFAULT_REFRESH_S": "tool_catalog",
    "DEFAULT_TENANT": "token_bucket",
    "DEFAULT_TTL_S": "tool_catalog",
    "EVENTS_MAXLEN": "approvals",
    "InvalidCatalogEntry": "tool_catalog",
    "MODEL_FIELD_PREFIX": "usage",
    "PRICES_FIELD_PREFIX": "usage",
    "PriceTableError": "price_table",
    "Reservation": "token_bucket",
    "StoredApproval": "approvals",
    "TokenBucket": "token_bucket",
    "ToolCatalogCache": "tool_catalog",
    "catalog_reader": "tool_catalog",
    "ToolCatalogPublisher": "tool_catalog",
    "UPDATED_FIELD": "usage",
    "fold_permission_updates": "approvals",
    "load_price_table": "price_table",
    "log": "tool_catalog",
    "model_field": "usage",
    "prune_expired": "tool_catalog",
    "rate_limit_key": "token_bucket",
    "read_catalog_snapshot": "tool_catalog",
    "read_price_file": "price_table",
    "read_tool_catalog": "tool_catalog",
    "read_usage": "usage",
    "record_model_usage": "usage",
    "record_priced_usage": "usage",
    "record_usage": "usage",
    "seen_key": "usage",
    "usage_from_hash": "usage",
}


__getattr__, __dir__ = lazy_facade(globals(), _MODULE_OF)
