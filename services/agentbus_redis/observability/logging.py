"""structlog configuration and the context helpers every worker uses (ecosystem.md §4.5).

- JSON lines (rendered by orjson, written as bytes) when the output is not a terminal, a colourless
  console renderer when it is; stdlib loggers (faststream, uvicorn, redis) go through the same renderer.
- The level comes from ``LOG_LEVEL`` (``Settings.log_level``). The bound logger is structlog's
  *filtering* logger, whose disabled methods are no-ops (~0.2 µs, redis-streams-baseline.md §6): log
  one INFO line per batch (:func:`log_batch`) and per-message lines only at DEBUG.
- Context (``session_id``, ``uuid``, ``tool_use_id``, ``trace_id``, ``span_id``, …) is bound with
  contextvars, so every line logged while handling a message carries it without passing loggers around.

Configure once per process, before consumers are built (they bind their loggers in ``__init__``).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any, Final, TextIO

import orjson
import structlog
from structlog.contextvars import bind_contextvars, bound_contextvars, unbind_contextvars
from structlog.types import EventDict, Processor, WrappedLogger

MESSAGE_KEYS: Final = ("session_id", "uuid", "parent_uuid", "tool_use_id", "entry_id", "delivery_count")
"""Context keys bound per message (unbound by :func:`clear_message_context`)."""

_configured_level = logging.INFO


def parse_level(level: str | int) -> int:
    """``"debug"``/``"INFO"``/``20`` → the numeric level; raises ``ValueError`` on an unknown name."""
    if isinstance(level, int):
        return level
    number = logging.getLevelNamesMapping().get(level.strip().upper())
    if number is None:
        msg = f"unknown log level {level!r} (use DEBUG, INFO, WARNING, ERROR or CRITICAL)"
        raise ValueError(msg)
    return number


def _orjson_text(obj: Any, **kwargs: Any) -> str:
    return orjson.dumps(obj, **kwargs).decode("utf-8")


def _static_fields(fields: dict[str, str]) -> Processor:
    """A processor adding process-wide fields (worker type, consumer name) to every line."""

    def add(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
        for key, value in fields.items():
            event_dict.setdefault(key, value)
        return event_dict

    return add


def configure_logging(
    level: str | int = "INFO",
    *,
    json: bool | None = None,
    stream: TextIO | None = None,
    static: dict[str, str] | None = None,
    cache_loggers: bool = True,
) -> None:
    """Configure structlog and the stdlib root logger for this process.

    ``json``: None chooses by ``stream.isatty()``. ``static``: fields on every line (e.g.
    ``{"worker": "tools"}``). ``cache_loggers``: structlog's ``cache_logger_on_first_use`` (turn off
    only where the configuration changes at run time, i.e. tests).
    """
    global _configured_level
    out = stream if stream is not None else sys.stdout
    level_no = parse_level(level)
    use_json = json if json is not None else not out.isatty()
    pre_chain: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if static:
        pre_chain.append(_static_fields(dict(static)))
    buffer = getattr(out, "buffer", None)
    logger_factory: Any
    if use_json:
        renderer: Processor = structlog.processors.JSONRenderer(serializer=orjson.dumps)
        processors: list[Processor] = [*pre_chain, structlog.processors.format_exc_info, renderer]
        if buffer is not None:
            logger_factory = structlog.BytesLoggerFactory(file=buffer)
        else:
            processors[-1] = structlog.processors.JSONRenderer(serializer=_orjson_text)
            logger_factory = structlog.PrintLoggerFactory(file=out)
        stdlib_renderer: Processor = structlog.processors.JSONRenderer(serializer=_orjson_text)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=False)
        processors = [*pre_chain, renderer]
        logger_factory = structlog.PrintLoggerFactory(file=out)
        stdlib_renderer = renderer
    structlog.reset_defaults()
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(level_no),
        logger_factory=logger_factory,
        cache_logger_on_first_use=cache_loggers,
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*pre_chain, structlog.stdlib.add_logger_name, structlog.processors.format_exc_info],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, stdlib_renderer],
        )
    )
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(level_no)
    _configured_level = level_no


def debug_enabled() -> bool:
    """Whether DEBUG lines are emitted: check before building costly per-message fields."""
    return _configured_level <= logging.DEBUG


def bind_message(
    *,
    session_id: str | None = None,
    uuid: str | None = None,
    parent_uuid: str | None = None,
    tool_use_id: str | None = None,
    entry_id: str | None = None,
) -> None:
    """Bind the given message identifiers (None ones are left as they are) to the current context."""
    fields = {
        key: value
        for key, value in (
            ("session_id", session_id),
            ("uuid", uuid),
            ("parent_uuid", parent_uuid),
            ("tool_use_id", tool_use_id),
            ("entry_id", entry_id),
        )
        if value is not None
    }
    if fields:
        bind_contextvars(**fields)


def clear_message_context() -> None:
    """Unbind the per-message keys (between messages of a batch)."""
    unbind_contextvars(*MESSAGE_KEYS)


@contextmanager
def message_context(**fields: str | int | None) -> Iterator[None]:
    """Bind ``fields`` (None ones skipped) for the duration of the block, restoring the previous values."""
    present = {key: value for key, value in fields.items() if value is not None}
    with bound_contextvars(**present):
        yield


def log_batch(
    logger: Any, *, stream: str, size: int, duration_s: float, level: int = logging.INFO, **fields: Any
) -> None:
    """The one INFO line per handled batch: ``batch_handled stream=… size=… duration_s=…``."""
    logger.log(level, "batch_handled", stream=stream, size=size, duration_s=round(duration_s, 6), **fields)


def render_to_dict(line: bytes | str) -> MutableMapping[str, Any]:
    """Parse one JSON log line (for tests and tools reading worker output)."""
    parsed = orjson.loads(line)
    if not isinstance(parsed, dict):
        msg = f"log line is not a JSON object: {line[:80]!r}"
        raise ValueError(msg)
    return parsed
