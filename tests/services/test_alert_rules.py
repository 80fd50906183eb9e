"""The Prometheus alerting rules (deploy/prometheus/alerts.yml): valid for promtool, covered by promtool unit
tests (alerts.test.yml: input series → expected alerts, annotations included), and reading only metrics the
workers export, so a renamed metric breaks this test instead of silencing an alert."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, Final, get_args

import pytest
import yaml

from agentbus_redis.approvals.records import APPROVAL_OUTCOMES
from agentbus_redis.config.settings import ToolSettings
from agentbus_redis.observability.labels import STREAM_FAMILIES, WORKER_TYPES
from agentbus_redis.observability.metrics import exported_sample_names
from agentbus_redis.observability.model_metrics import CallOutcome
from agentbus_redis.observability.wiring import DEFAULT_PROGRESS_TIMEOUT_S
from tests.conftest import REPO_ROOT

PROMETHEUS_DIR: Final = REPO_ROOT / "deploy" / "prometheus"
RULES: Final = PROMETHEUS_DIR / "alerts.yml"
RULE_TESTS: Final = PROMETHEUS_DIR / "alerts.test.yml"
CONFIG: Final = PROMETHEUS_DIR / "prometheus.yml"

SEVERITIES: Final = {"critical", "warning", "info"}
SCRAPE_SERIES: Final = {"up"}
"""Series Prometheus itself writes for every target."""

promtool = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    promtool is None, reason="promtool is not installed (Debian package `prometheus`; .ci/run installs it)"
)


def alerting_rules() -> list[dict[str, Any]]:
    loaded = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in loaded["groups"] for rule in group["rules"] if "alert" in rule]


# --------------------------------------------------------------------------------- metric names in PromQL
_STRING: Final = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS: Final = re.compile(r"\{[^{}]*\}")
_RANGE: Final = re.compile(r"\[[^\[\]]*\]")
_LABEL_LIST: Final = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENTIFIER: Final = re.compile(r"(?<![\w:.])([A-Za-z_:][\w:]*)(?![\w:]|\s*\()")
_KEYWORDS: Final = {
    "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset",
    "inf", "nan",
}  # fmt: skip


def selector_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers left once strings, label matchers, ranges
    and grouping clauses are removed, that are not functions (followed by ``(``), keywords or numbers."""
    text = _STRING.sub(" ", expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _LABEL_LIST.sub(" ", text)
    return {name for name in _IDENTIFIER.findall(text) if name.lower() not in _KEYWORDS}


def test_selector_names_reads_promql() -> None:
    expr = """
        sum by (lane) (agentbus_lane_shards_owned) < on (lane) count by (lane) (label_replace(
          max by (group, shard) (agentbus_stream_group_present{stream!~"a|b"}), "lane", "$1", "group", "(.+)"))
        or histogram_quantile(0.9, sum by (le) (rate(gen_ai_client_operation_duration_seconds_bucket[5m])))
        / on (model) group_left sum without (instance) (increase(agentbus_model_calls_total[1h] offset 5m)) > 1e3
        and up{job=~"agentbus-.+"} == bool 0
    """
    assert selector_names(expr) == {
        "agentbus_lane_shards_owned",
        "agentbus_stream_group_present",
        "gen_ai_client_operation_duration_seconds_bucket",
        "agentbus_model_calls_total",
        "up",
    }


def test_rules_read_only_metrics_the_workers_export() -> None:
    exported = exported_sample_names()
    for rule in alerting_rules():
        names = selector_names(rule["expr"])
        assert names, f"{rule['alert']}: no metric found in {rule['expr']!r}"
        unknown = sorted(names - exported - SCRAPE_SERIES)
        assert not unknown, f"{rule['alert']} reads metrics no worker exports: {unknown}"


def test_label_values_the_rules_match_are_the_codes() -> None:
    exprs = "\n".join(rule["expr"] for rule in alerting_rules())
    for label, value, vocabulary in (
        ("outcome", "api_error", get_args(CallOutcome)),
        ("outcome", "timed_out", APPROVAL_OUTCOMES),
        ("stream", "tool_jobs", STREAM_FAMILIES),
        ("worker", "tools", WORKER_TYPES),
    ):
        assert f'{label}="{value}"' in exprs or f'{label}!="{value}"' in exprs, (label, value)
        assert value in vocabulary, f"{label}={value!r} is not a value the code writes"


def test_thresholds_leave_room_for_the_defaults() -> None:
    """A tool worker's loop and its oldest pending job may legitimately wait the whole tool deadline; other
    loops must step within the liveness limit."""
    rules = {rule["alert"]: rule["expr"] for rule in alerting_rules()}
    deadline_s = ToolSettings().deadline_s
    stalled = dict(re.findall(r'\{worker(!?=)"tools"\} > (\d+)', rules["AgentbusConsumerStalled"]))
    assert int(stalled["!="]) > DEFAULT_PROGRESS_TIMEOUT_S
    assert int(stalled["="]) > deadline_s
    pending = dict(re.findall(r'\{stream(!?=)"tool_jobs"\}\) > (\d+)', rules["AgentbusOldestPendingTooOld"]))
    assert int(pending["="]) > deadline_s


# ------------------------------------------------------------------------------------------- rule shape
def test_every_rule_waits_has_a_severity_and_says_what_to_do() -> None:
    rules = alerting_rules()
    names = [rule["alert"] for rule in rules]
    assert len(names) == len(set(names)), "alert names are unique"
    for rule in rules:
        assert re.fullmatch(r"Agentbus[A-Z]\w+", rule["alert"]), rule["alert"]
        assert re.fullmatch(r"\d+[smh]", str(rule.get("for", ""))), f"{rule['alert']}: needs `for:`"
        assert rule.get("labels", {}).get("severity") in SEVERITIES, f"{rule['alert']}: severity"
        annotations = rule.get("annotations", {})
        assert annotations.get("summary"), f"{rule['alert']}: summary"
        assert len(annotations.get("description", "")) > 80, f"{rule['alert']}: description says what to do"


def test_the_alerts_of_issue_27_exist() -> None:
    read = {name for rule in alerting_rules() for name in selector_names(rule["expr"])}
    for needed in (
        "up",  # workers down
        "agentbus_consumers_connected",  # not ready: Redis unreachable
        "agentbus_lane_shards_owned",  # shard without owner
        "agentbus_stream_lag",
        "agentbus_stream_pending",
        "agentbus_consumer_entries_dead_lettered_total",
        "agentbus_sessions_stuck_ended_total",
        "agentbus_model_calls_total",  # model error rate
        "agentbus_model_fallbacks_total",
        "agentbus_approvals_pending",
        "agentbus_approval_decisions_total",
    ):
        assert needed in read, needed


def test_every_alert_has_a_firing_unit_test() -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text(encoding="utf-8"))
    assert tests["rule_files"] == [RULES.name]
    fired = {
        case["alertname"]
        for test in tests["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    missing = sorted({rule["alert"] for rule in alerting_rules()} - fired)
    assert not missing, f"alerts without a promtool unit test that fires them: {missing}"


# --------------------------------------------------------------------------------------------- promtool
def run_promtool(*args: str, cwd: Path = PROMETHEUS_DIR) -> None:
    assert promtool is not None
    result = subprocess.run([promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, f"promtool {' '.join(args)}:\n{result.stdout}\n{result.stderr}"


@needs_promtool
def test_promtool_checks_the_rules() -> None:
    run_promtool("check", "rules", RULES.name)


@needs_promtool
def test_promtool_unit_tests_pass() -> None:
    run_promtool("test", "rules", RULE_TESTS.name)


@needs_promtool
def test_promtool_checks_the_config_with_its_rule_files() -> None:
    run_promtool("check", "config", CONFIG.name)


def test_deploy_readme_lists_every_alert() -> None:
    readme = (REPO_ROOT / "deploy" / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Alerts", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"`(Agentbus\w+)`", section))
    listed |= {f"{name}Critical" for name in re.findall(r"`(Agentbus\w+)` / `…Critical`", section)}
    assert listed == {rule["alert"] for rule in alerting_rules()}
