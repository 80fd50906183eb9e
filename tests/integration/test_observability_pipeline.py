"""Issue 5 "Done when", end to end: the four workers as their own processes, each connected as its own
Redis ACL user (deploy/redis/users.acl, so the ACL file is also proven sufficient), traffic driven
through the pipeline, every ``/metrics`` scraped, and one prompt's ``traceparent`` followed through all
four workers' logs.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentbus_redis.bus.events import AssistantReply, UserPrompt
from agentbus_redis.messages.content import TextBlock, ToolUseBlock
from agentbus_redis.messages.factories import create_assistant_message
from agentbus_redis.observability.tracing import new_root, parse_traceparent
from agentbus_redis.runtime.codec import DATA_FIELD
from agentbus_redis.sdk.client import AgentbusClient
from agentbus_redis.transcript_files.layout import session_file
from tests.integration.cluster import Worker, WorkerCluster, eventually
from tests.services.acl_redis import AclRedis, start_acl_redis
from tests.services.test_deploy_files import dashboard_metric_names, k8s_prometheus_queries

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SESSION = "observed-session-1"
WORKER_NAMES = ("ingestion", "tools", "normalization", "transcripts")


class AclCluster(WorkerCluster):
    """Workers that each connect as their own ACL user, logging at DEBUG (per-message trace lines)."""

    acl: AclRedis

    def run_streams_init(self) -> subprocess.CompletedProcess[str]:
        """``agentbus streams init`` as the operator user (what compose's streams-init service runs)."""
        env = {**self.env(), "REDIS_URL": self.acl.url("operator")}
        command = [sys.executable, "-m", "agentbus_redis.cli.main", "streams", "init"]
        return subprocess.run(command, env=env, capture_output=True, text=True, check=False, timeout=60)

    def start(self, name: str, count: int = 1) -> list[Worker]:
        self.extra_env = {
            **self.extra_env,
            "REDIS_URL": self.acl.url(name),
            "LOG_LEVEL": "DEBUG",
            # Trim right behind the groups, so the ACL file is proven to allow retention too.
            "AGENTBUS_RETENTION__KEEP_ACKED_S": "0",
            "AGENTBUS_RETENTION__INTERVAL_S": "0.2",
        }
        return super().start(name, count)


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclCluster]:
    root = tmp_path_factory.mktemp("observed")
    server = start_acl_redis(root / "redis")
    cluster = AclCluster(redis_url=server.url("operator"), root=root)
    cluster.acl = server
    try:
        yield cluster
    finally:
        cluster.stop()
        server.stop()


def scrape(worker: Worker) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    """The worker's /metrics as family name → samples (name, labels, value); families without samples
    are present with an empty list."""
    with urllib.request.urlopen(f"http://127.0.0.1:{worker.port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    families: dict[str, list[tuple[str, dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        families[family.name] = [(s.name, dict(s.labels), s.value) for s in family.samples]
    return families


def sample_names(families: dict[str, list[tuple[str, dict[str, str], float]]]) -> set[str]:
    """Every sample name the exposition declares: real samples, plus the names a declared family's
    samples take (``_total``, ``_bucket``/``_count``/``_sum``) when it has none yet."""
    names = {name for samples in families.values() for name, _, _ in samples}
    for family in families:
        names.update({family, f"{family}_total", f"{family}_bucket", f"{family}_count", f"{family}_sum"})
    return names


def value(families: dict[str, list[tuple[str, dict[str, str], float]]], name: str, **labels: str) -> float:
    total = 0.0
    for samples in families.values():
        for sample_name, sample_labels, sample_value in samples:
            if sample_name == name and all(sample_labels.get(k) == v for k, v in labels.items()):
                total += sample_value
    return total


def log_lines(worker: Worker) -> list[dict[str, Any]]:
    lines = []
    for raw in worker.log_path.read_text(errors="replace").splitlines():
        if raw.startswith("{"):
            lines.append(json.loads(raw))
    return lines


def transcript_path(cluster: WorkerCluster) -> Path:
    return session_file(cluster.data_dir, cluster.cwd, SESSION)


async def test_metrics_exported_and_one_prompt_followed_through_all_four_workers(observed: AclCluster) -> None:
    (observed.workspace).mkdir(parents=True, exist_ok=True)
    (observed.workspace / "notes.txt").write_text("hello\n")
    run = observed.run_streams_init()
    assert run.returncode == 0, run.stderr
    for name in WORKER_NAMES:
        observed.start(name)
    observed.wait_ready()

    root = new_root()
    async with AgentbusClient.connect(observed.redis_url, names=observed.names) as bus:
        await bus.publish(SESSION, UserPrompt(content="list the notes"), traceparent=root.traceparent)
        first = await bus.next_request(SESSION, after_seq=0, timeout_s=60)
        reply = create_assistant_message(
            [
                TextBlock(text="Looking."),
                ToolUseBlock(id="toolu_glob", name="Glob", input={"pattern": "*.txt"}),
                ToolUseBlock(id="toolu_rm", name="Bash", input={"command": "rm -rf /"}),
            ],
        )
        await bus.publish(SESSION, AssistantReply(message=reply), traceparent=root.child().traceparent)
        await bus.redis.xadd(observed.names.session_stream(SESSION, "ingress"), {DATA_FIELD: b"{not json"})
        second = await bus.next_request(SESSION, after_seq=first.seq, timeout_s=60)
        results = [
            block["tool_use_id"]
            for block in second.request["messages"][-1]["content"]
            if isinstance(block, dict) and block.get("type") == "tool_result"
        ]
        assert sorted(results) == ["toolu_glob", "toolu_rm"]
        history = await bus.history(SESSION)

        async def transcript_written() -> bool:
            path = transcript_path(observed)
            return path.exists() and len(path.read_text().splitlines()) >= len(history)

        await eventually(transcript_written, timeout_s=60)

    # Every log entry of the session carries the prompt's trace (continued, so with other span ids).
    traces = {parse_traceparent(entry.traceparent).trace_id for entry in history if entry.traceparent}
    assert traces == {root.trace_id}
    assert all(entry.traceparent for entry in history)
    assert root.traceparent not in {entry.traceparent for entry in history}

    async def ingress_trimmed() -> bool:
        ingestion = next(worker for worker in observed.workers if worker.name == "ingestion")
        return value(await asyncio.to_thread(scrape, ingestion), "agentbus_stream_entries_trimmed_total") > 0

    # Retention under the ACL: the ingress shards are trimmed behind the ingestion group.
    await eventually(ingress_trimmed, timeout_s=30)

    # ---- every /metrics: each family the dashboard and the KEDA objects reference is exported.
    referenced = dashboard_metric_names() | {name for query in k8s_prometheus_queries() for name in query}
    scraped = {worker.name: scrape(worker) for worker in observed.workers}
    for name, families in scraped.items():
        missing = sorted(referenced - sample_names(families))
        assert not missing, f"{name} /metrics lacks {missing}"

    # ---- and the traffic shows up where it happened.
    ingestion, tools = scraped["ingestion"], scraped["tools"]
    normalization, transcripts = scraped["normalization"], scraped["transcripts"]
    assert value(ingestion, "agentbus_events_consumed_total", type="user_prompt") >= 1
    assert value(ingestion, "agentbus_events_consumed_total", type="tool_result") >= 1
    assert value(ingestion, "agentbus_events_dead_lettered_total", reason="invalid_entry") >= 1
    assert value(ingestion, "agentbus_consumer_entries_dead_lettered_total", worker="ingestion") >= 1
    assert value(ingestion, "agentbus_events_produced_total", stream="tool_jobs") >= 1
    assert value(ingestion, "agentbus_batch_duration_seconds_count", worker="ingestion") >= 1
    assert value(ingestion, "agentbus_consumers", worker="ingestion") >= 1
    assert value(ingestion, "agentbus_lane_shards_owned", worker="ingestion") == observed.names.shards
    assert value(ingestion, "agentbus_stream_group_present", group="ingestion") == observed.names.shards
    assert value(tools, "agentbus_tool_executions_total", tool="Glob", outcome="ok") == 1
    assert value(tools, "agentbus_tool_executions_total", tool="Bash", outcome="denied") == 1
    assert value(tools, "agentbus_tool_execution_duration_seconds_count", tool="Glob") == 1
    assert value(normalization, "agentbus_requests_published_total") >= 2
    assert value(normalization, "agentbus_end_to_end_latency_seconds_count", stage="request_published") >= 2
    assert value(transcripts, "agentbus_transcript_lines_appended_total") >= len(history) - 1
    assert value(transcripts, "agentbus_transcript_fsync_duration_seconds_count") >= 1
    assert value(transcripts, "agentbus_end_to_end_latency_seconds_count", stage="transcript_durable") >= 1
    assert value(transcripts, "agentbus_end_to_end_latency_seconds_count", stage="log_written") >= 1
    assert "stream_trim_failed" not in observed.logs()  # no NOPERM: the ACL file allows XTRIM
    for families in scraped.values():
        assert value(families, "agentbus_build_info") == 1
        assert value(families, "agentbus_consumer_handler_errors_total") == 0

    # ---- every worker runs on uvloop (`agentbus worker` once ran the stdlib loop despite asking for uvloop).
    loops = {
        worker.name: line.get("event_loop")
        for worker in observed.workers
        for line in log_lines(worker)
        if line.get("event") == "worker_started"
    }
    assert loops == dict.fromkeys(WORKER_NAMES, "uvloop.Loop"), observed.logs()[-4000:]

    # ---- one prompt's traceparent through all four workers' logs.
    seen_in = {
        worker.name
        for worker in observed.workers
        for line in log_lines(worker)
        if line.get("trace_id") == root.trace_id
    }
    assert seen_in == set(WORKER_NAMES), observed.logs()[-4000:]
    spans = {
        line["span_id"]
        for worker in observed.workers
        for line in log_lines(worker)
        if line.get("trace_id") == root.trace_id and "span_id" in line
    }
    assert root.span_id not in spans, "workers continue the trace with spans of their own"
