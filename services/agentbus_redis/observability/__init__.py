"""Operating agentbus: metrics, health endpoints, structured logs and trace propagation.

One concept per module (ecosystem.md §4.3–4.6):

- ``labels``: bounded Prometheus label values (stream families, event types, guards);
- ``metrics``: every ``agentbus_*`` metric and the per-batch recording functions workers call;
- ``consumer_metrics``: a collector publishing the counters of registered ``BatchConsumer``s at scrape time;
- ``stream_stats``: the per-process poller of consumer-group lag / pending / length (XINFO GROUPS);
- ``health``: ``/healthz`` (consume loops make progress) and ``/readyz`` (Redis, groups, not draining);
- ``endpoints``: the ASGI routes (``/healthz``, ``/readyz``, ``/metrics``) for ``AsgiFastStream``;
- ``logging``: structlog configuration and contextvars binding helpers;
- ``tracing``: W3C ``traceparent`` parsing, propagation and optional OpenTelemetry spans;
- ``wiring``: ``WorkerObservability``, the one object a worker builds to get all of the above.
"""
