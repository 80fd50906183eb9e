"""Processes on one machine: a private redis-server or Redis Cluster, and the supervisor behind `agentbus up`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentbus_redis.lazy_facade import lazy_facade

if TYPE_CHECKING:
    from agentbus_redis.local.redis_cluster import (
        NODE_TIMEOUT_MS,
        ClusterNodeProcess,
        LocalRedisCluster,
        start_local_cluster,
    )
    from agentbus_redis.local.redis_server import (
        KEEPER_POLL_INTERVAL_S,
        KEEPER_START_TIMEOUT_S,
        LocalRedis,
        PrivateRedisKeeper,
        RedisServerUnavailable,
        free_port,
        is_reachable,
        server_args,
        start_local_redis,
        stop_process,
    )
    from agentbus_redis.local.supervisor import (
        LISTEN_FD_ENV,
        POLL_INTERVAL_S,
        PR_SET_PDEATHSIG,
        READ_CHUNK,
        Child,
        LineSink,
        RestartPolicy,
        SupervisionFailed,
        Supervisor,
        bind_listener,
        bind_listener_near,
        die_with_parent,
        http_ok,
        probe_address,
    )

__all__ = [
    "KEEPER_POLL_INTERVAL_S",
    "KEEPER_START_TIMEOUT_S",
    "LISTEN_FD_ENV",
    "NODE_TIMEOUT_MS",
    "POLL_INTERVAL_S",
    "PR_SET_PDEATHSIG",
    "READ_CHUNK",
    "Child",
    "ClusterNodeProcess",
    "LineSink",
    "LocalRedis",
    "LocalRedisCluster",
    "PrivateRedisKeeper",
    "RedisServerUnavailable",
    "RestartPolicy",
    "SupervisionFailed",
    "Supervisor",
    "bind_listener",
    "bind_listener_near",
    "die_with_parent",
    "free_port",
    "http_ok",
    "is_reachable",
    "probe_address",
    "server_args",
    "start_local_cluster",
    "start_local_redis",
    "stop_process",
]

_MODULE_OF = {
    "Child": "supervisor",
    "ClusterNodeProcess": "redis_cluster",
    "KEEPER_POLL_INTERVAL_S": "redis_server",
    "KEEPER_START_TIMEOUT_S": "redis_server",
    "LISTEN_FD_ENV": "supervisor",
    "LineSink": "supervisor",
    "LocalRedis": "redis_server",
    "LocalRedisCluster": "redis_cluster",
    "NODE_TIMEOUT_MS": "redis_cluster",
    "POLL_INTERVAL_S": "supervisor",
    "PR_SET_PDEATHSIG": "supervisor",
    "PrivateRedisKeeper": "redis_server",
    "READ_CHUNK": "supervisor",
    "RedisServerUnavailable": "redis_server",
    "RestartPolicy": "supervisor",
    "SupervisionFailed": "supervisor",
    "Supervisor": "supervisor",
    "bind_listener": "supervisor",
    "bind_listener_near": "supervisor",
    "die_with_parent": "supervisor",
    "free_port": "redis_server",
    "http_ok": "supervisor",
    "is_reachable": "redis_server",
    "probe_address": "supervisor",
    "server_args": "redis_server",
    "start_local_cluster": "redis_cluster",
    "start_local_redis": "redis_server",
    "stop_process": "redis_server",
}


__getattr__, __dir__ = lazy_facade(globals(), _MODULE_OF)
