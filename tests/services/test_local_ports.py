"""The ports tests and ``agentbus up`` hand to servers they start: chosen where no outgoing connection can take
them, and a private Redis that lost its port to another process between the choice and its bind is started
again on another one."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from agentbus_redis.local import redis_server
from agentbus_redis.local.redis_server import LOWEST_LISTEN_PORT, ephemeral_port_floor, free_port, start_local_redis


def test_a_free_port_is_below_the_kernels_ephemeral_range_and_bindable() -> None:
    for _ in range(50):
        port = free_port()
        assert LOWEST_LISTEN_PORT <= port < ephemeral_port_floor()
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_cluster_nodes_port_leaves_room_for_its_bus_port() -> None:
    for _ in range(50):
        port = free_port(headroom=10_000)
        assert port + 10_000 < ephemeral_port_floor()


def test_a_private_redis_whose_chosen_port_was_taken_starts_on_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        choices = iter([taken.getsockname()[1]])
        real_free_port = redis_server.free_port
        monkeypatch.setattr(redis_server, "free_port", lambda **kw: next(choices, None) or real_free_port(**kw))
        taken_port = taken.getsockname()[1]
        server = start_local_redis(tmp_path / "redis")
    try:
        assert server.port != taken_port
        assert redis_server.is_reachable(server.url)
        assert "Address already in use" in server.log_path.read_text()  # the first try's, in the same directory
    finally:
        server.stop()


def test_a_port_the_caller_named_is_not_replaced(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(redis_server.RedisServerUnavailable, match="exited"):
            start_local_redis(tmp_path / "redis", port=taken.getsockname()[1])


def test_a_private_redis_in_a_temp_dir_of_its_own_removes_it_when_stopped(tmp_path: Path) -> None:
    """Benches start Redis without a directory: each run left a temp dir behind. One the caller gave is kept."""
    server = start_local_redis()
    try:
        directory = server.directory
        assert directory.is_dir()
        server.restart()  # a restart keeps the directory (and the append-only file, when there is one)
        assert directory.is_dir()
        assert redis_server.is_reachable(server.url)
    finally:
        server.stop()
    assert not directory.exists()
    given = start_local_redis(tmp_path / "redis")
    given.stop()
    assert (tmp_path / "redis").is_dir()
