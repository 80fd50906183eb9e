"""Metrics of human approvals (agent-loop.md §H): how many wait, how long people take, how they decide.

Labels are bounded: ``outcome`` is one of :data:`agentbus_redis.approvals.records.APPROVAL_OUTCOMES`, ``tool`` goes
through
the tool label guard. The pending gauge is the store's count (every tool worker reports the same number;
dashboards take ``max``).
"""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.metrics_core import Metric

from agentbus_redis.approvals.records import ApprovalOutcome
from agentbus_redis.observability.labels import tool_label
from agentbus_redis.observability.switch import recording

DECISION_BUCKETS: Final = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 86400.0)
"""Seconds from the request to its decision: people answer in seconds to hours."""

APPROVALS_PENDING = Gauge(
    "agentbus_approvals_pending", "Tool calls waiting for a person's approval (all sessions, from the store)."
)
APPROVAL_DECISION_DURATION = Histogram(
    "agentbus_approval_decision_seconds",
    "From an approval request to its decision, by outcome (allowed, denied, timed_out, cancelled).",
    ["outcome"],
    buckets=DECISION_BUCKETS,
)
APPROVAL_DECISIONS = Counter(
    "agentbus_approval_decisions_total", "Resolved approvals by outcome and tool.", ["outcome", "tool"]
)
APPROVALS_REQUESTED = Counter("agentbus_approvals_requested_total", "Approval requests by tool.", ["tool"])


def describe_metrics() -> list[Metric]:
    """The families above, for :func:`agentbus_redis.observability.metrics.metric_families`."""
    return [
        family
        for metric in (APPROVALS_PENDING, APPROVAL_DECISION_DURATION, APPROVAL_DECISIONS, APPROVALS_REQUESTED)
        for family in metric.describe()
    ]


def record_approval_requested(tool: str) -> None:
    if recording():
        APPROVALS_REQUESTED.labels(tool_label(tool)).inc()


def record_approval_decision(tool: str, outcome: ApprovalOutcome, waited_s: float) -> None:
    if recording():
        APPROVAL_DECISIONS.labels(outcome, tool_label(tool)).inc()
        APPROVAL_DECISION_DURATION.labels(outcome).observe(max(waited_s, 0.0))


def set_approvals_pending(count: int) -> None:
    if recording():
        APPROVALS_PENDING.set(count)
