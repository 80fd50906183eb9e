"""Issue 16: the bus commands against a real Redis, each run as its own process — the failures a user
meets (no workers, an unknown session, a wrong dead-letter stream or id) are one line and exit 1, and the
listings say what their columns are (``streams info``' oldest pending, ``dlq ls``' header and newest)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from agentbus_redis.config.settings import Settings
from agentbus_redis.streams.deadletter import DeadLetter
from agentbus_redis.streams.topology import INGESTION_GROUP, Topology
from tests.cli.process import AGENTBUS, agentbus, cli_env
from tests.integration.cluster import WorkerCluster

pytestmark = pytest.mark.integration

TOPOLOGY = Topology(Settings(_env_file=None).names)  # type: ignore[call-arg]


def test_send_wait_without_workers_times_out_in_one_line(redis_url: str, tmp_path: Path) -> None:
    outcome = agentbus("send", "s1", "hello", "--wait", "--timeout", "1", cwd=tmp_path, env=cli_env(redis_url))
    assert outcome.code == 1
    assert re.fullmatch(
        r"agentbus: no request for session s1 after seq 0 within 1\.0s; prompt \d+-\d+ is queued: "
        r"are the workers running\? \(`agentbus up` starts them\)",
        outcome.error_line,
    )


async def test_tail_of_an_unknown_session_says_so(redis_url: str, tmp_path: Path, aredis: aioredis.Redis) -> None:
    outcome = agentbus("tail", "nobody", cwd=tmp_path, env=cli_env(redis_url))
    assert outcome.code == 1
    assert outcome.error_line == f"agentbus: no session 'nobody' on {redis_url} (`agentbus send nobody TEXT` starts it)"
    await aredis.zadd(TOPOLOGY.sessions(TOPOLOGY.names.shard_of("quiet")), {"quiet": 1})
    known = agentbus("tail", "quiet", cwd=tmp_path, env=cli_env(redis_url))
    assert (known.code, known.stdout, known.stderr) == (0, "", "")


def test_send_and_tail_through_running_workers(cluster: WorkerCluster, tmp_path: Path) -> None:
    cluster.start("ingestion")
    cluster.start("normalization")
    cluster.wait_ready()
    env = cli_env(**{k: v for k, v in cluster.env().items() if k.startswith("AGENTBUS_") or k == "REDIS_URL"})
    sent = agentbus("send", "s1", "list the files", "--wait", "--timeout", "60", cwd=tmp_path, env=env)
    assert sent.code == 0, sent.stderr
    assert re.fullmatch(r"sent \d+-\d+", sent.stderr.strip())
    assert json.loads(sent.stdout)["messages"][-1]["role"] == "user"
    tail = agentbus("tail", "s1", cwd=tmp_path, env=env)
    assert tail.code == 0, tail.stderr
    assert re.search(r"^\s+\d+ user\s+list the files$", tail.stdout, re.MULTILINE), tail.stdout


async def test_streams_info_shows_the_oldest_pending_age(
    redis_url: str, tmp_path: Path, aredis: aioredis.Redis
) -> None:
    env = cli_env(redis_url)
    assert agentbus("streams", "init", cwd=tmp_path, env=env).code == 0
    ingress = TOPOLOGY.ingress(0)
    await aredis.xadd(ingress, {"data": b"{}"})
    await aredis.xreadgroup(INGESTION_GROUP, "c1", {ingress: ">"}, count=1)
    outcome = agentbus("streams", "info", cwd=tmp_path, env=env)
    assert outcome.code == 0, outcome.stderr
    header, *rows = outcome.stdout.splitlines()
    assert header.split() == ["stream", "group", "length", "lag", "pending", "oldest", "pending"]
    pending_row = next(row.split() for row in rows if row.startswith(f"{ingress} "))
    assert pending_row[1:5] == [INGESTION_GROUP, "1", "0", "1"]
    assert re.fullmatch(r"\d+\.\ds", pending_row[5])
    idle_row = next(row.split() for row in rows if row.startswith(f"{TOPOLOGY.ingress(1)} "))
    assert idle_row[-1] == "-"
    as_json = json.loads(agentbus("streams", "info", "--json", cwd=tmp_path, env=env).stdout)
    assert next(row for row in as_json if row["stream"] == ingress)["oldest_pending_s"] >= 0


async def _dead_letters(aredis: aioredis.Redis, count: int) -> tuple[str, list[str]]:
    stream = TOPOLOGY.tool_jobs(0)
    dlq = TOPOLOGY.names.dead_letter_stream(stream)
    ids = []
    for number in range(count):
        letter = DeadLetter(
            stream=stream,
            group="tools",
            entry_id=f"{number + 1}-0",
            consumer="c1",
            delivery_count=5,
            reason="max_deliveries",
            detail=f"letter {number}",
            at_ms=1,
            fields={"data": b"{}"},
        )
        ids.append((await aredis.xadd(dlq, letter.to_stream_fields())).decode())  # type: ignore[arg-type]
    return dlq, ids


async def test_dlq_ls_has_a_header_and_limit_keeps_the_newest(
    redis_url: str, tmp_path: Path, aredis: aioredis.Redis
) -> None:
    env = cli_env(redis_url)
    empty = agentbus("dlq", "ls", cwd=tmp_path, env=env)
    assert (empty.code, empty.stdout, empty.stderr) == (0, "", "agentbus: no dead letters\n")
    dlq, ids = await _dead_letters(aredis, 5)
    outcome = agentbus("dlq", "ls", "--limit", "2", cwd=tmp_path, env=env)
    assert outcome.code == 0, outcome.stderr
    header, *rows = outcome.stdout.splitlines()
    assert header.split() == ["dead-letter", "stream", "id", "reason", "source", "entry", "detail"]
    assert [row.split()[:2] for row in rows] == [[dlq, ids[3]], [dlq, ids[4]]]  # the newest two, oldest first
    assert rows[-1].endswith("letter 4")


async def test_dlq_show_and_replay_of_a_wrong_stream_or_id(
    redis_url: str, tmp_path: Path, aredis: aioredis.Redis
) -> None:
    env = cli_env(redis_url)
    dlq, ids = await _dead_letters(aredis, 1)
    shown = agentbus("dlq", "show", dlq, ids[0], cwd=tmp_path, env=env)
    assert shown.code == 0, shown.stderr
    assert json.loads(shown.stdout)["detail"] == "letter 0"

    missing = agentbus("dlq", "show", dlq, "1-0", cwd=tmp_path, env=env)
    assert (missing.code, missing.error_line) == (1, f"agentbus: no dead letter 1-0 in {dlq}")
    replay_missing = agentbus("dlq", "replay", dlq, "1-0", cwd=tmp_path, env=env)
    assert (replay_missing.code, replay_missing.error_line) == (1, f"agentbus: no dead letter 1-0 in {dlq}")

    plain_id = (await aredis.xadd("agentbus:not-a-dlq", {"a": "b"})).decode()
    not_a_letter = agentbus("dlq", "show", "agentbus:not-a-dlq", plain_id, cwd=tmp_path, env=env)
    assert not_a_letter.code == 1
    assert not_a_letter.error_line.startswith(f"agentbus: agentbus:not-a-dlq entry {plain_id}: missing history fields")
    assert not_a_letter.error_line.endswith("not a dead letter (`agentbus dlq ls` lists them)")

    await aredis.set("agentbus:a-string", "x")
    wrong_type = agentbus("dlq", "show", "agentbus:a-string", "1-0", cwd=tmp_path, env=env)
    assert wrong_type.code == 1
    assert wrong_type.error_line.startswith(f"agentbus: Redis at {redis_url} refused the command: WRONGTYPE")

    replayed = agentbus("dlq", "replay", dlq, ids[0], cwd=tmp_path, env=env)
    assert replayed.code == 0, replayed.stderr
    assert re.fullmatch(r"\d+-\d+\n", replayed.stdout)
    assert await aredis.xlen(dlq) == 0


def test_tail_follow_waits_for_an_unknown_session_and_ctrl_c_ends_it(redis_url: str, tmp_path: Path) -> None:
    follower = subprocess.Popen(
        [*AGENTBUS, "tail", "-f", "later"],
        cwd=tmp_path,
        env=cli_env(redis_url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert follower.stderr is not None
    assert follower.stderr.readline() == f"agentbus: no session 'later' on {redis_url} yet; waiting for it\n"
    follower.send_signal(signal.SIGINT)
    _, rest = follower.communicate(timeout=60)
    assert follower.returncode == 130
    assert rest == ""
