"""The pure parts of ``agentbus up``'s supervision and log view (issue 16); the processes themselves are
tested in tests/integration/test_cli_up.py."""

from __future__ import annotations

import io
from pathlib import Path

import orjson

from agentbus_redis.cli.local.up_logs import WorkerLogs, shown_on_console
from agentbus_redis.local.supervisor import RestartPolicy, bind_listener_near


def test_restart_backoff_doubles_to_a_cap_and_gives_up_after_max_restarts() -> None:
    policy = RestartPolicy(max_restarts=5, backoff_initial_s=0.5, backoff_max_s=8.0)
    assert [policy.delay_s(n) for n in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
    assert not policy.gives_up(5)
    assert policy.gives_up(6)


def test_a_taken_port_is_replaced_by_a_free_one() -> None:
    first, as_wanted = bind_listener_near("127.0.0.1", 0)
    with first:
        port = first.getsockname()[1]
        second, second_as_wanted = bind_listener_near("127.0.0.1", port)
        with second:
            assert as_wanted
            assert not second_as_wanted
            assert second.getsockname()[1] != port


def test_console_keeps_warnings_and_worker_starts_not_batches() -> None:
    assert shown_on_console({"event": "redis_unavailable", "level": "warning"})
    assert shown_on_console({"event": "worker_started", "level": "info"})
    assert not shown_on_console({"event": "batch_handled", "level": "info"})


def test_worker_logs_file_gets_every_line_the_console_a_readable_few(tmp_path: Path) -> None:
    out = io.StringIO()
    logs = WorkerLogs(tmp_path / "logs" / "up.log", console=True, out=out)
    batch = orjson.dumps({"event": "batch_handled", "level": "info", "worker": "ingestion", "size": 3})
    started = orjson.dumps({"event": "worker_started", "level": "info", "worker": "ingestion"})
    logs.line("ingestion", batch)
    logs.line("ingestion", started)
    logs.line("ingestion", b"Traceback (most recent call last):")
    logs.close()
    assert (tmp_path / "logs" / "up.log").read_bytes().splitlines() == [
        batch,
        started,
        b"Traceback (most recent call last):",
    ]
    shown = out.getvalue().splitlines()
    assert len(shown) == 2
    assert "worker_started" in shown[0]
    assert "{" not in shown[0]
    assert shown[1].endswith("Traceback (most recent call last):")
