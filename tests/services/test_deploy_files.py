"""docker-compose.yml, the Dockerfile, the Kustomize tree, the Prometheus and Grafana files and the Redis ACL
file are checked against the code (no Docker engine or cluster runs here): every command they run is a
real ``agentbus`` CLI command, every environment variable and port exists in ``Settings``/the code, every
metric a dashboard or KEDA object references is exported, every stream and group a scaler reads is the
topology's, and every ACL user works against a real Redis.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
import typer.main
import yaml
from pydantic import AliasChoices, BaseModel
from typer.testing import CliRunner

from agentbus_redis.cli.local.up import FAKE_MODEL_KEY
from agentbus_redis.cli.main import app as cli_app
from agentbus_redis.config.settings import Settings
from agentbus_redis.observability.endpoints import HEALTHZ_PATH, METRICS_PATH, READYZ_PATH
from agentbus_redis.observability.metrics import exported_sample_names
from agentbus_redis.runtime.redis_client import is_cluster_url
from agentbus_redis.streams.names import StreamNames
from agentbus_redis.streams.topology import (
    INGESTION_GROUP,
    LANE_OF_GROUP,
    MODEL_GROUP,
    NORMALIZATION_GROUP,
    TOOLS_GROUP,
    TRANSCRIPTS_GROUP,
    Topology,
)
from agentbus_redis.tools.pools import DEFAULT_POOL
from agentbus_redis.workers.registry import WORKER_FACTORIES
from agentbus_redis.workers.tools.loading import load_tools
from tests.conftest import REPO_ROOT
from tests.docs.examples import blocks_of
from tests.services.acl_redis import AclRedis, dev_password, start_acl_redis

DEPLOY = REPO_ROOT / "deploy"
COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
DOCKERFILE = DEPLOY / "Dockerfile"
ACL_FILE = DEPLOY / "redis" / "users.acl"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "agentbus.json"
PROMETHEUS = DEPLOY / "prometheus" / "prometheus.yml"
ALERT_RULES = DEPLOY / "prometheus" / "alerts.yml"
WORKER_NAMES = (*WORKER_FACTORIES, "console")
"""What `agentbus worker NAME` runs: the five pipeline workers and the web console."""
K8S_BASE = DEPLOY / "k8s" / "base"
K8S_DEV = DEPLOY / "k8s" / "overlays" / "dev"

WORKER_GROUPS = {
    "ingestion": INGESTION_GROUP,
    "tools": TOOLS_GROUP,
    "normalization": NORMALIZATION_GROUP,
    "transcripts": TRANSCRIPTS_GROUP,
    "model": MODEL_GROUP,
}
METRIC_NAME = re.compile(r"\bagentbus_[a-z0-9_]+\b")
ENV_READ_IN_CODE = re.compile(r"""(?:os\.environ\.get|os\.getenv|os\.environ\[)\(?\s*["']([A-Z][A-Z0-9_]*)["']""")

runner = CliRunner()


# --------------------------------------------------------------------------------------------- helpers
def settings_env_names() -> set[str]:
    """Every environment variable ``Settings`` reads (case-insensitive, so upper-cased)."""
    prefix = Settings.model_config.get("env_prefix", "")
    delimiter = Settings.model_config.get("env_nested_delimiter") or "__"
    names: set[str] = set()
    for field_name, info in Settings.model_fields.items():
        alias = info.validation_alias
        if isinstance(alias, AliasChoices):
            names.update(str(choice).upper() for choice in alias.choices)
        elif isinstance(alias, str):
            names.add(alias.upper())
        else:
            names.add(f"{prefix}{field_name}".upper())
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            for sub_name in annotation.model_fields:
                names.add(f"{prefix}{field_name}{delimiter}{sub_name}".upper())
    return names


def code_env_names() -> set[str]:
    """Environment variables read directly by the code (``os.environ.get("X")`` and friends)."""
    names: set[str] = set()
    for root in ("services", "shared"):
        for path in (REPO_ROOT / root).rglob("*.py"):
            names.update(ENV_READ_IN_CODE.findall(path.read_text(encoding="utf-8")))
    return names


KNOWN_ENV = settings_env_names() | code_env_names() | {"PYTHONPATH"}
"""PYTHONPATH: where a tool pool's worker finds a team's tool modules (Python's own variable)."""


def assert_env_known(env: Mapping[str, Any], where: str) -> None:
    unknown = sorted(name for name in env if name.upper() not in KNOWN_ENV)
    assert not unknown, f"{where}: environment variables not read by Settings or the code: {unknown}"


def settings_from(env: Mapping[str, Any], monkeypatch: pytest.MonkeyPatch) -> Settings:
    """``Settings`` as a process started with exactly ``env`` would build it (must validate)."""
    for name in KNOWN_ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, str(value))
    return Settings(_env_file=None)


def cli_command_path(argv: list[str]) -> tuple[list[str], list[str]]:
    """Split ``argv`` into the (sub)command path of the ``agentbus`` CLI and the remaining arguments.

    Walks the command tree typer builds (typer vendors click, so groups are recognised by their
    ``commands`` mapping rather than by class; the root loads a sub-command when asked by name).
    """
    command: Any = typer.main.get_command(cli_app)
    path: list[str] = []
    rest = list(argv)
    while rest and isinstance(getattr(command, "commands", None), dict):
        sub = command.get_command(command.make_context("agentbus", [], resilient_parsing=True), rest[0])
        if sub is None:
            break
        path.append(rest.pop(0))
        command = sub
    assert not isinstance(getattr(command, "commands", None), dict), f"{argv}: names a command group"
    return path, rest


def assert_real_cli_command(argv: list[str], where: str) -> None:
    """``agentbus <argv>`` names an existing command (``--help`` works) with valid arguments."""
    assert argv, f"{where}: empty command"
    path, args = cli_command_path(argv)
    assert path, f"{where}: {argv[0]!r} is not an agentbus command"
    result = runner.invoke(cli_app, [*path, "--help"])
    assert result.exit_code == 0, f"{where}: agentbus {' '.join(path)} --help failed: {result.output}"
    if path == ["worker"]:
        assert args, f"{where}: worker takes a NAME"
        assert args[0] in WORKER_NAMES, f"{where}: unknown worker {args[0]!r}"
        root: Any = typer.main.get_command(cli_app)
        worker = root.get_command(root.make_context("agentbus", [], resilient_parsing=True), "worker")
        worker.make_context("worker", list(args))  # its options parse (a tool pool's --pool, --tools …)
    else:
        assert not args, f"{where}: unexpected arguments {args} for agentbus {' '.join(path)}"


def acl_users() -> dict[str, list[str]]:
    users: dict[str, list[str]] = {}
    for line in ACL_FILE.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        keyword, name, *rules = line.split()
        assert keyword == "user", f"ACL line must start with 'user': {line!r}"
        users[name] = rules
    return users


def assert_url_matches_acl(url: str, where: str) -> str:
    """The URL's user exists in the ACL file with the sha256 of the URL's password; returns the user."""
    parts = urlsplit(url)
    assert parts.username, f"{where}: REDIS_URL carries no user"
    assert parts.password, f"{where}: REDIS_URL carries no password"
    rules = acl_users().get(parts.username)
    assert rules is not None, f"{where}: no ACL user {parts.username!r}"
    digest = hashlib.sha256(parts.password.encode()).hexdigest()
    assert f"#{digest}" in rules, f"{where}: password of {parts.username!r} does not match its ACL hash"
    assert "on" in rules
    return parts.username


def load_yaml_documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def base_resources() -> list[dict[str, Any]]:
    """The base manifests as listed by ``deploy/k8s/base/kustomization.yaml``."""
    kustomization = yaml.safe_load((K8S_BASE / "kustomization.yaml").read_text(encoding="utf-8"))
    docs: list[dict[str, Any]] = []
    for resource in kustomization["resources"]:
        docs.extend(load_yaml_documents(K8S_BASE / resource))
    return docs


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in docs if doc["kind"] == kind}


def dashboard_exprs() -> Iterator[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]


def dashboard_metric_names() -> set[str]:
    return {name for _, expr in dashboard_exprs() for name in METRIC_NAME.findall(expr)}


def k8s_prometheus_queries() -> list[set[str]]:
    """The metric names of every KEDA ``prometheus`` trigger's query (the redis-streams triggers read
    Redis directly and reference no metric)."""
    queries = []
    for scaled in by_kind(base_resources(), "ScaledObject").values():
        for trigger in scaled["spec"]["triggers"]:
            if trigger["type"] == "prometheus":
                queries.append(set(METRIC_NAME.findall(trigger["metadata"]["query"])))
    return queries


# ---------------------------------------------------------------------------------------- the commands
def test_env_helpers_know_the_settings() -> None:
    assert {"REDIS_URL", "LOG_LEVEL", "AGENTBUS_HTTP_PORT", "AGENTBUS_SHARDS", "AGENTBUS_TOOLS__WORKSPACE"} <= KNOWN_ENV
    assert "AGENTBUS_BUILD_COMMIT" in KNOWN_ENV  # read by observability/metrics.py
    assert "AGENTBUS_NOT_A_SETTING" not in KNOWN_ENV


def test_cli_helper_rejects_unknown_commands() -> None:
    with pytest.raises(AssertionError):
        assert_real_cli_command(["wroker", "tools"], "test")
    with pytest.raises(AssertionError):
        assert_real_cli_command(["worker", "nosuchworker"], "test")
    with pytest.raises(AssertionError):
        assert_real_cli_command(["streams"], "test")


# ---------------------------------------------------------------------------------------------- compose
@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    return loaded


def agentbus_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The agentbus processes that use Redis (the fake model server, same image, does not)."""
    return {
        name: svc
        for name, svc in compose["services"].items()
        if svc.get("image", "").startswith("agentbus") and svc.get("command", [""])[0] != "fake-model"
    }


def test_compose_services(compose: dict[str, Any]) -> None:
    assert set(compose["services"]) == {
        "redis",
        "streams-init",
        "ingestion",
        "tools",
        "tools-weather",
        "normalization",
        "transcripts",
        "model",
        "console",
        "fake-model",
        "prometheus",
        "grafana",
    }
    fake = compose["services"]["fake-model"]
    assert_real_cli_command(fake["command"][:1], "compose service fake-model")  # its options: --help below
    assert fake["image"] == compose["services"]["model"]["image"]
    help_text = runner.invoke(cli_app, ["fake-model", "--help"]).output
    assert all(option in help_text for option in fake["command"][1::2]), help_text
    assert compose["services"]["model"]["environment"]["AGENTBUS_MODEL__BASE_URL"].endswith("http://fake-model:8080}")
    images = {svc["image"] for svc in agentbus_services(compose).values()}
    assert len(images) == 1, "one image for every agentbus process"
    builds = {json.dumps(svc["build"], sort_keys=True) for svc in agentbus_services(compose).values()}
    assert len(builds) == 1
    (build,) = (svc["build"] for svc in list(agentbus_services(compose).values())[:1])
    assert (REPO_ROOT / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE


def test_compose_commands_are_cli_commands(compose: dict[str, Any]) -> None:
    workers = {}
    for name, svc in agentbus_services(compose).items():
        assert_real_cli_command(svc["command"], f"compose service {name}")
        if svc["command"][0] == "worker":
            workers[name] = svc["command"][1]
    assert agentbus_services(compose)["streams-init"]["command"] == ["streams", "init"]
    assert set(workers.values()) == set(WORKER_NAMES), "each worker type runs as a service"
    assert compose["services"]["tools"]["deploy"]["replicas"] == 2


def test_compose_runs_a_second_tool_pool_with_the_readmes_tools(
    compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 29: the ``weather`` pool runs only the module compose mounts — the README's example tool, which the
    k8s ConfigMap carries too — and that module loads."""
    pool = compose["services"]["tools-weather"]
    command = pool["command"]
    assert command[:2] == ["worker", "tools"]
    assert command[command.index("--pool") + 1] == "weather"
    assert "--no-builtins" in command
    spec = command[command.index("--tools") + 1]
    mounts = {volume.split(":")[1]: REPO_ROOT / volume.split(":")[0] for volume in pool["volumes"]}
    tools_dir = mounts[pool["environment"]["PYTHONPATH"]]
    module = (tools_dir / "weather_tools.py").read_text(encoding="utf-8")
    readme = next(block for block in blocks_of(REPO_ROOT / "README.md") if "weather_tools.py" in block.code)
    assert readme.code == module, "the README's tool is the one compose runs"
    configmap = by_kind(base_resources(), "ConfigMap")["agentbus-tools-weather"]["data"]["weather_tools.py"]
    assert configmap == module, "deploy/k8s/base/configmap-tools-weather.yaml carries deploy/tools/weather_tools.py"
    monkeypatch.syspath_prepend(str(tools_dir))
    (weather,) = load_tools([spec], entry_points=False)
    assert weather.name == "weather"


def test_compose_env_exists_and_validates(compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    for name, svc in agentbus_services(compose).items():
        env = svc["environment"]
        assert_env_known(env, f"compose service {name}")
        settings = settings_from(env, monkeypatch)
        assert settings.http_port == 8000
        assert settings.http_host == "0.0.0.0", "Prometheus scrapes from another container (issue 15)"
        user = assert_url_matches_acl(env["REDIS_URL"], f"compose service {name}")
        if svc["command"][0] == "worker":
            assert user == svc["command"][1], f"{name} connects as {user!r}, not as its own ACL user"
        else:
            assert user == "operator"


def test_compose_worker_healthchecks_hit_readyz_on_the_http_port(compose: dict[str, Any]) -> None:
    for name, svc in agentbus_services(compose).items():
        if svc["command"][0] != "worker":
            continue
        test = " ".join(svc["healthcheck"]["test"])
        port = svc["environment"]["AGENTBUS_HTTP_PORT"]
        assert f"http://127.0.0.1:{port}{READYZ_PATH}" in test, name
        assert svc["depends_on"]["streams-init"]["condition"] == "service_completed_successfully"


def test_compose_redis_has_aof_and_the_acl_file(compose: dict[str, Any]) -> None:
    redis_svc = compose["services"]["redis"]
    command = redis_svc["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    acl_path = command[command.index("--aclfile") + 1]
    mounts = {volume.split(":")[1]: volume.split(":")[0] for volume in redis_svc["volumes"]}
    assert (REPO_ROOT / mounts[acl_path]).resolve() == ACL_FILE
    assert redis_svc["image"].startswith("redis:7"), "lagCount needs Redis 7+"
    health = redis_svc["healthcheck"]["test"]
    user, password = health[health.index("--user") + 1], health[health.index("--pass") + 1]
    rules = acl_users()[user]
    assert f"#{hashlib.sha256(password.encode()).hexdigest()}" in rules


def test_compose_mounted_files_exist(compose: dict[str, Any]) -> None:
    for name, svc in compose["services"].items():
        for volume in svc.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (REPO_ROOT / source).exists(), f"{name}: mounts missing {source}"
    grafana_mounts = {v.split(":")[1]: v.split(":")[0] for v in compose["services"]["grafana"]["volumes"]}
    provider = yaml.safe_load((DEPLOY / "grafana/provisioning/dashboards/agentbus.yml").read_text())
    dashboards_path = provider["providers"][0]["options"]["path"]
    assert (REPO_ROOT / grafana_mounts[dashboards_path] / DASHBOARD.name).resolve() == DASHBOARD


# ------------------------------------------------------------------------------------------- Dockerfile
def dockerfile_instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text(encoding="utf-8").replace("\\\n", " ")
    rows = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            keyword, _, rest = stripped.partition(" ")
            rows.append((keyword.upper(), rest.strip()))
    return rows


def test_dockerfile_runs_the_cli_and_sets_known_env() -> None:
    rows = dockerfile_instructions()
    entrypoint = json.loads(next(rest for keyword, rest in rows if keyword == "ENTRYPOINT"))
    cmd = json.loads(next(rest for keyword, rest in reversed(rows) if keyword == "CMD"))
    assert entrypoint == ["agentbus"]
    assert_real_cli_command(cmd, "Dockerfile CMD")
    last_from = max(index for index, (keyword, _) in enumerate(rows) if keyword == "FROM")
    env: dict[str, str] = {}
    for keyword, rest in rows[last_from:]:  # the runtime stage (build stages only set uv's variables)
        if keyword == "ENV":
            for pair in rest.split():
                name, _, value = pair.partition("=")
                env[name] = value
    env.pop("PATH")
    env.pop("PYTHONUNBUFFERED")
    assert_env_known(env, "Dockerfile")
    exposed = {rest for keyword, rest in rows if keyword == "EXPOSE"}
    assert exposed == {env["AGENTBUS_HTTP_PORT"]}
    assert env["AGENTBUS_HTTP_HOST"] == "0.0.0.0"  # an exposed port must listen beyond loopback (issue 15)
    assert any(keyword == "FROM" and "python:3.11-slim" in rest for keyword, rest in rows) or any(
        keyword == "ARG" and rest == "PYTHON_IMAGE=python:3.11-slim" for keyword, rest in rows
    )
    for keyword, rest in rows:
        if keyword == "COPY" and "--from" not in rest:
            *sources, _target = rest.split()
            for source in sources:
                assert (REPO_ROOT / source).exists(), f"Dockerfile copies missing {source}"


# ------------------------------------------------------------------------------------------- Prometheus
def test_prometheus_scrapes_the_four_workers(compose: dict[str, Any]) -> None:
    config = yaml.safe_load(PROMETHEUS.read_text(encoding="utf-8"))
    scraped: dict[str, int] = {}
    for job in config["scrape_configs"]:
        assert job.get("metrics_path", "/metrics") == METRICS_PATH
        for sd in job["dns_sd_configs"]:
            for name in sd["names"]:
                scraped[name] = sd["port"]
    worker_services = {
        name: svc
        for name, svc in agentbus_services(compose).items()
        if svc["command"][0] == "worker" and svc["command"][1] != "console"  # a view of the bus: no /metrics
    }
    assert set(scraped) == set(worker_services)
    for name, port in scraped.items():
        assert str(port) == worker_services[name]["environment"]["AGENTBUS_HTTP_PORT"]


def test_prometheus_loads_the_alert_rules_in_compose(compose: dict[str, Any]) -> None:
    """``rule_files`` is relative to the config file, so the rules must sit beside it in the container."""
    config = yaml.safe_load(PROMETHEUS.read_text(encoding="utf-8"))
    assert config["rule_files"] == [ALERT_RULES.name]
    assert (PROMETHEUS.parent / config["rule_files"][0]).resolve() == ALERT_RULES
    mounts = {
        v.split(":")[1]: (REPO_ROOT / v.split(":")[0]).resolve() for v in compose["services"]["prometheus"]["volumes"]
    }
    config_in_container = next(target for target, source in mounts.items() if source == PROMETHEUS)
    assert mounts[str(Path(config_in_container).parent / ALERT_RULES.name)] == ALERT_RULES
    assert yaml.safe_load(ALERT_RULES.read_text(encoding="utf-8"))["groups"]


# ---------------------------------------------------------------------------------------------- Grafana
def test_dashboard_uses_only_exported_metrics() -> None:
    exported = exported_sample_names()
    referenced = dashboard_metric_names()
    missing = sorted(referenced - exported)
    assert not missing, f"dashboard references metrics no worker exports: {missing}"
    assert referenced, "the dashboard references no agentbus metric"


def test_dashboard_covers_the_operations_views() -> None:
    referenced = dashboard_metric_names()
    for needed in (
        "agentbus_consumer_entries_consumed_total",  # throughput per stage
        "agentbus_end_to_end_latency_seconds_bucket",  # end-to-end latency
        "agentbus_stream_lag",
        "agentbus_stream_pending",
        "agentbus_consumer_entries_dead_lettered_total",
        "agentbus_tool_executions_total",
        "agentbus_normalization_repairs_total",
    ):
        assert needed in referenced, needed


def test_dashboard_datasource_is_the_provisioned_one() -> None:
    datasource = yaml.safe_load((DEPLOY / "grafana/provisioning/datasources/prometheus.yml").read_text())
    uid = datasource["datasources"][0]["uid"]
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == uid, panel["title"]
        assert panel["targets"], panel["title"]
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))


# --------------------------------------------------------------------------------------------- Kustomize
@pytest.fixture(scope="module")
def k8s() -> list[dict[str, Any]]:
    return base_resources()


def config_env(k8s: list[dict[str, Any]]) -> dict[str, str]:
    data: dict[str, str] = by_kind(k8s, "ConfigMap")["agentbus-config"]["data"]
    return data


def test_k8s_config_is_settings(k8s: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    env = config_env(k8s)
    assert_env_known(env, "ConfigMap agentbus-config")
    settings = settings_from({**env, "REDIS_URL": "redis://x:y@agentbus-redis:6379/0"}, monkeypatch)
    assert settings.http_port == 8000
    assert settings.http_host == "0.0.0.0", "probes and Prometheus reach the pod's IP (issue 15)"
    for key, url in by_kind(k8s, "Secret")["agentbus-redis"]["stringData"].items():
        if key.endswith("-url"):
            assert assert_url_matches_acl(url, f"Secret key {key}") == key.removesuffix("-url")


def test_k8s_deployment_per_worker_with_probes(k8s: list[dict[str, Any]]) -> None:
    deployments = by_kind(k8s, "Deployment")
    secret = by_kind(k8s, "Secret")["agentbus-redis"]["stringData"]
    port = int(config_env(k8s)["AGENTBUS_HTTP_PORT"])
    seen = []
    for name, deployment in deployments.items():
        spec = deployment["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        assert_real_cli_command(container["args"], f"Deployment {name}")
        worker = container["args"][1]
        seen.append(worker)
        pool = pool_of(container["args"])
        assert name == (f"agentbus-{worker}" if pool == DEFAULT_POOL else f"agentbus-{worker}-{pool}")
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports["http"] == port
        assert container["livenessProbe"]["httpGet"] == {"path": HEALTHZ_PATH, "port": "http"}
        assert container["readinessProbe"]["httpGet"] == {"path": READYZ_PATH, "port": "http"}
        assert [ref["configMapRef"]["name"] for ref in container["envFrom"]] == ["agentbus-config"]
        assert_env_known({item["name"]: "" for item in container["env"]}, f"Deployment {name}")
        (redis_url,) = [item for item in container["env"] if item["name"] == "REDIS_URL"]
        key = redis_url["valueFrom"]["secretKeyRef"]["key"]
        assert key == f"{worker}-url"
        assert key in secret
        assert spec["terminationGracePeriodSeconds"] > 0
    assert set(seen) == set(WORKER_NAMES)
    assert sorted(pool_of(d["spec"]["template"]["spec"]["containers"][0]["args"]) for d in deployments.values()) == [
        *[DEFAULT_POOL] * len(WORKER_NAMES),
        "weather",
    ], "a second tool pool (issue 29)"
    tools_grace = deployments["agentbus-tools"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert tools_grace > Settings(_env_file=None).tools.timeout_s, "tool workers stop with the tool timeout"


def test_k8s_streams_init_job(k8s: list[dict[str, Any]]) -> None:
    (job,) = by_kind(k8s, "Job").values()
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["streams", "init"]
    assert_real_cli_command(container["args"], "Job streams-init")
    (redis_url,) = [item for item in container["env"] if item["name"] == "REDIS_URL"]
    assert redis_url["valueFrom"]["secretKeyRef"]["key"] == "operator-url"


def test_k8s_scaledobjects_read_the_topology(k8s: list[dict[str, Any]]) -> None:
    """KEDA: lagCount per worker type, one trigger per shard stream of a lane, maxReplicaCount <= shards,
    minReplicaCount 1 (keda #6478), a fallback for scaler errors (keda #7447)."""
    shards = int(config_env(k8s)["AGENTBUS_SHARDS"])
    topology = Topology(StreamNames(prefix=Settings(_env_file=None).prefix, shards=shards))
    deployments = by_kind(k8s, "Deployment")
    auths = by_kind(k8s, "TriggerAuthentication")
    secret = by_kind(k8s, "Secret")["agentbus-redis"]["stringData"]
    exported = exported_sample_names()
    objects = by_kind(k8s, "ScaledObject")
    consumers = {
        name
        for name, d in deployments.items()
        if d["spec"]["template"]["spec"]["containers"][0]["args"][1] != "console"
    }
    assert {o["spec"]["scaleTargetRef"]["name"] for o in objects.values()} == consumers, (
        "one ScaledObject per stream-consuming Deployment (each tool pool on its own backlog; the console reads none)"
    )
    for name, scaled in objects.items():
        spec = scaled["spec"]
        target = spec["scaleTargetRef"]["name"]
        assert target in deployments
        args = deployments[target]["spec"]["template"]["spec"]["containers"][0]["args"]
        worker = args[1]
        group = WORKER_GROUPS[worker]
        expected = (
            topology.tool_job_streams(pool_of(args))
            if group == TOOLS_GROUP
            else topology.request_streams()
            if group == MODEL_GROUP
            else topology.lane_streams(group)
        )
        assert spec["minReplicaCount"] >= 1, name
        assert spec["fallback"]["replicas"] >= 1, name
        triggers = spec["triggers"]
        for trigger in triggers:
            if trigger["type"] == "prometheus":
                for metric in METRIC_NAME.findall(trigger["metadata"]["query"]):
                    assert metric in exported, f"{name}: KEDA query uses unexported {metric}"
                continue
            assert trigger["type"] == "redis-streams"
            meta = trigger["metadata"]
            assert meta["consumerGroup"] == group
            assert int(meta["lagCount"]) >= 1
            assert int(meta["activationLagCount"]) >= 1
            auth = auths[trigger["authenticationRef"]["name"]]
            for ref in auth["spec"]["secretTargetRef"]:
                assert ref["key"] in secret
        assert [t["metadata"]["stream"] for t in triggers if t["type"] == "redis-streams"] == expected
        if group in LANE_OF_GROUP:
            assert spec["maxReplicaCount"] <= shards, f"{name}: replicas beyond {shards} shards own nothing"


def pool_of(args: list[str]) -> str:
    """The tool pool a worker command serves (``--pool NAME``; the default pool without it)."""
    return args[args.index("--pool") + 1] if "--pool" in args else DEFAULT_POOL


def test_k8s_prometheus_rules_configmap_carries_the_alert_rules(k8s: list[dict[str, Any]]) -> None:
    """Kustomize cannot read files outside deploy/k8s, so the ConfigMap holds a copy; its header says how
    to regenerate it."""
    configmap = by_kind(k8s, "ConfigMap")["agentbus-prometheus-rules"]
    assert configmap["data"] == {"alerts.yml": ALERT_RULES.read_text(encoding="utf-8")}, (
        "deploy/k8s/base/prometheus-rules.yaml differs from deploy/prometheus/alerts.yml: regenerate it "
        "(command in its header)"
    )
    # No Prometheus Operator in these manifests (scraping is by pod annotations), hence no PrometheusRule.
    assert not by_kind(k8s, "PrometheusRule")


def test_k8s_keda_user_is_read_only() -> None:
    rules = acl_users()["keda"]
    commands = {rule for rule in rules if rule.startswith(("+", "-"))}
    assert commands == {
        "-@all",
        "+ping",
        "+xinfo|groups",
        "+xinfo|stream",
        "+xlen",
        "+xpending",
        "+cluster|slots",  # KEDA's redis-cluster-streams scaler discovers the slot map (issue 20)
        "+cluster|shards",
    }
    assert all(not rule.startswith("~") for rule in rules), "KEDA only reads (%R~)"


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (for kustomize build) is not installed")
def test_k8s_dev_overlay_builds() -> None:
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(K8S_DEV)], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    docs = [doc for doc in yaml.safe_load_all(rendered) if doc]
    assert {doc["metadata"].get("namespace") for doc in docs if doc["kind"] != "Namespace"} == {"agentbus-dev"}
    assert by_kind(docs, "ConfigMap")["agentbus-config"]["data"]["LOG_LEVEL"] == "DEBUG"
    assert_env_known(by_kind(docs, "ConfigMap")["agentbus-config"]["data"], "dev ConfigMap")
    for scaled in by_kind(docs, "ScaledObject").values():
        assert 1 <= scaled["spec"]["maxReplicaCount"] <= 2
    images = {
        container["image"]
        for doc in docs
        if doc["kind"] in {"Deployment", "Job"}
        for container in doc["spec"]["template"]["spec"]["containers"]
    }
    assert "agentbus:dev" in images
    assert "alerts.yml" in by_kind(docs, "ConfigMap")["agentbus-prometheus-rules"]["data"]
    assert_dev_model_calls_the_fake_server(docs)


def assert_dev_model_calls_the_fake_server(docs: list[dict[str, Any]]) -> None:
    """As in compose: the dev overlay runs ``agentbus fake-model`` and its model workers call it."""
    deployments = by_kind(docs, "Deployment")
    fake = deployments["agentbus-fake-model"]
    (container,) = fake["spec"]["template"]["spec"]["containers"]
    assert_real_cli_command(container["args"][:1], "Deployment agentbus-fake-model")
    help_text = runner.invoke(cli_app, ["fake-model", "--help"]).output
    assert all(option in help_text for option in container["args"][1::2]), help_text
    assert container["image"] == "agentbus:dev"
    options = dict(zip(container["args"][1::2], container["args"][2::2], strict=True))
    assert options["--host"] == "0.0.0.0"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["http"] == int(options["--port"])
    assert container["readinessProbe"]["httpGet"] == {"path": READYZ_PATH, "port": "http"}
    service = by_kind(docs, "Service")["agentbus-fake-model"]
    assert service["spec"]["selector"] == fake["spec"]["template"]["metadata"]["labels"]
    (service_port,) = service["spec"]["ports"]
    assert service_port["targetPort"] == "http"
    (worker,) = deployments["agentbus-model"]["spec"]["template"]["spec"]["containers"]
    env = {item["name"]: item.get("value") for item in worker["env"]}
    assert env["AGENTBUS_MODEL__BASE_URL"] == f"http://agentbus-fake-model:{service_port['port']}"
    assert {item["name"] for item in worker["env"]} >= {"REDIS_URL", "AGENTBUS_INTERNAL_KEY", "ANTHROPIC_API_KEY"}
    assert by_kind(docs, "Secret")["agentbus-anthropic"]["stringData"]["api-key"] == FAKE_MODEL_KEY


# ------------------------------------------------------------------------------------------ ACL (Redis)
@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclRedis]:
    """A private redis-server started with ``--aclfile deploy/redis/users.acl`` (as compose runs it)."""
    server = start_acl_redis(tmp_path_factory.mktemp("acl-redis"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def acl_redis(acl_server: AclRedis) -> int:
    """The port of the ACL server (tests use distinct keys; even the operator may not FLUSHDB)."""
    return acl_server.port


def client(port: int, user: str) -> redis.Redis:
    return redis.Redis(port=port, username=user, password=dev_password(user))


def test_acl_default_user_is_off(acl_redis: int) -> None:
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=acl_redis).ping()


def test_acl_tools_worker_is_refused_the_log_it_does_not_own(acl_redis: int) -> None:
    """The tools user writes results to ingress and consumes tool jobs, but cannot read or write the
    canonical log (ingestion's) nor the request keys (normalization's)."""
    log_stream = "agentbus:{s03}:log"
    operator = client(acl_redis, "operator")
    operator.xgroup_create(log_stream, NORMALIZATION_GROUP, id="0", mkstream=True)
    tools = client(acl_redis, "tools")
    with pytest.raises(redis.exceptions.NoPermissionError):
        tools.xadd(log_stream, {"data": "{}"})
    with pytest.raises(redis.exceptions.NoPermissionError):
        tools.xreadgroup(NORMALIZATION_GROUP, "intruder", {log_stream: ">"}, count=1)
    with pytest.raises(redis.exceptions.NoPermissionError):
        tools.xrange(log_stream)
    with pytest.raises(redis.exceptions.NoPermissionError):
        tools.set("agentbus:{s03}:session:abc:request", "{}")
    # Its own: the tool-job stream (group, read, ack) and the ingress shards (results go back there).
    tools.xgroup_create("agentbus:{s03}:tools:jobs", TOOLS_GROUP, id="0", mkstream=True)
    operator.xadd("agentbus:{s03}:tools:jobs", {"data": "{}"})
    reply: Any = tools.xreadgroup(TOOLS_GROUP, "tools-1", {"agentbus:{s03}:tools:jobs": ">"}, count=10)
    (entry_id, _), *_ = reply[0][1]
    assert tools.xack("agentbus:{s03}:tools:jobs", TOOLS_GROUP, entry_id) == 1
    assert tools.xadd("agentbus:{s03}:ingress", {"data": "{}"})
    # Session flags are readable, not writable.
    assert tools.sismember("agentbus:{s03}:session:abc:retracted", "u1") == 0
    with pytest.raises(redis.exceptions.NoPermissionError):
        tools.sadd("agentbus:{s03}:session:abc:retracted", "u1")


def test_acl_each_worker_owns_its_group_streams_and_leases(acl_redis: int) -> None:
    operator = client(acl_redis, "operator")
    for worker, group in WORKER_GROUPS.items():
        user = client(acl_redis, worker)
        family = {TOOLS_GROUP: "tools:jobs", MODEL_GROUP: "requests"}.get(group) or LANE_OF_GROUP[group]
        streams = [f"agentbus:{{s05}}:{family}"]
        for stream in streams:
            if not _has_group(operator, stream, group):
                user.xgroup_create(stream, group, id="$", mkstream=True)
            operator.xadd(stream, {"data": "{}"})
            reply: Any = user.xreadgroup(group, f"{worker}-1", {stream: ">"}, count=10)
            ids = [entry_id for entry_id, _ in reply[0][1]]
            assert user.xack(stream, group, *ids) == len(ids)
            assert user.xadd(stream + ":dlq", {"reason": "test"})
            user.xautoclaim(stream, group, f"{worker}-1", 0, "0-0")
            user.xpending(stream, group)
            assert any(g["name"].decode() == group for g in user.xinfo_groups(stream))
            user.xtrim(stream, minid="0-1")  # retention: each worker trims the work streams it reads
        if group in LANE_OF_GROUP:
            lease = f"agentbus:lease:{group}:{{s05}}"
            script = user.register_script(
                "redis.call('SET', KEYS[1], ARGV[1], 'PX', 1000) return redis.call('INCR', KEYS[2])"
            )
            assert int(script(keys=[lease, f"agentbus:lease_epoch:{group}:{{s05}}"], args=[worker])) >= 1
            with pytest.raises(redis.exceptions.NoPermissionError):
                script(keys=["agentbus:lease:tools-not-mine:{s05}", lease], args=[worker])
        # Issue 20: a cluster client discovers the slot map and the commands' key positions (not a NOPERM).
        assert user.command_count() > 0
        with pytest.raises(redis.exceptions.ResponseError, match="cluster support disabled"):
            user.execute_command("CLUSTER", "SLOTS")


def test_acl_only_ingestion_writes_the_log(acl_redis: int) -> None:
    assert client(acl_redis, "ingestion").xadd("agentbus:{s01}:log", {"data": "{}"})
    with pytest.raises(redis.exceptions.NoPermissionError):
        client(acl_redis, "ingestion").set("agentbus:{s01}:session:abc:request", "{}")
    assert client(acl_redis, "normalization").set("agentbus:{s01}:session:abc:request", "{}")
    with pytest.raises(redis.exceptions.NoPermissionError):
        client(acl_redis, "transcripts").xadd("agentbus:{s01}:ingress", {"data": "{}"})
    with pytest.raises(redis.exceptions.NoPermissionError):
        client(acl_redis, "transcripts").get("agentbus:{s01}:session:abc:request")


def test_acl_keda_reads_lag_but_writes_nothing(acl_redis: int) -> None:
    keda = client(acl_redis, "keda")
    client(acl_redis, "operator").xgroup_create("agentbus:{s02}:ingress", INGESTION_GROUP, id="0", mkstream=True)
    groups = keda.xinfo_groups("agentbus:{s02}:ingress")
    assert groups[0]["lag"] == 0
    with pytest.raises(redis.exceptions.NoPermissionError):
        keda.xadd("agentbus:{s02}:ingress", {"data": "{}"})
    with pytest.raises(redis.exceptions.NoPermissionError):
        keda.xinfo_groups("not-agentbus")


def _has_group(client_: redis.Redis, stream: str, group: str) -> bool:
    try:
        return any(g["name"].decode() == group for g in client_.xinfo_groups(stream))
    except redis.ResponseError:
        return False


# ------------------------------------------------------------------------------------ compose: cluster
def test_compose_cluster_override_runs_the_workers_on_a_3x2_cluster(compose: dict[str, Any]) -> None:
    """Issue 20: docker-compose.cluster.yml (an override of docker-compose.yml) runs six cluster nodes (AOF,
    the ACL file, replicas authenticating as an ACL user), forms a 3-master, 1-replica cluster once, and
    points every agentbus service at it with a redis+cluster:// URL as its own ACL user."""
    override: dict[str, Any] = yaml.safe_load((REPO_ROOT / "docker-compose.cluster.yml").read_text(encoding="utf-8"))
    services = override["services"]
    nodes = {name: svc for name, svc in services.items() if name.startswith("redis-node-")}
    assert len(nodes) == 6
    for name, node in nodes.items():
        command = node["command"]
        assert command[command.index("--cluster-enabled") + 1] == "yes", name
        assert command[command.index("--appendonly") + 1] == "yes", name
        acl_path = command[command.index("--aclfile") + 1]
        mounts = {volume.split(":")[1]: volume.split(":")[0] for volume in node["volumes"]}
        assert (REPO_ROOT / mounts[acl_path]).resolve() == ACL_FILE
        user, password = command[command.index("--masteruser") + 1], command[command.index("--masterauth") + 1]
        rules = acl_users()[user]
        assert f"#{hashlib.sha256(password.encode()).hexdigest()}" in rules
        assert {"+psync", "+replconf"} <= set(rules), "replicas must be allowed to sync"
    create = " ".join(services["redis-cluster-create"]["command"])
    assert "--cluster create" in create
    assert "--cluster-replicas 1" in create
    for name in agentbus_services(compose):
        url = services[name]["environment"]["REDIS_URL"]
        assert is_cluster_url(url), name
        user = assert_url_matches_acl(url, f"cluster compose service {name}")
        command = compose["services"][name]["command"]
        assert user == (command[1] if command[0] == "worker" else "operator")
