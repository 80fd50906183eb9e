"""structlog configuration: JSON off a TTY, console on one, level filtering, contextvars binding."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import orjson
import pytest
import structlog

from agentbus_redis.observability.logging import (
    bind_message,
    clear_message_context,
    configure_logging,
    debug_enabled,
    log_batch,
    message_context,
    parse_level,
)
from agentbus_redis.observability.tracing import WorkerTracer


class TextOut(io.StringIO):
    def isatty(self) -> bool:
        return False


class BytesOut(io.TextIOWrapper):
    """A text stream with a ``buffer``, like ``sys.stdout`` redirected to a file."""

    def __init__(self) -> None:
        self.raw_bytes = io.BytesIO()
        super().__init__(self.raw_bytes, encoding="utf-8", write_through=True)

    def isatty(self) -> bool:
        return False

    def lines(self) -> list[dict[str, object]]:
        self.flush()
        return [orjson.loads(line) for line in self.raw_bytes.getvalue().splitlines() if line]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()
    root.handlers = handlers
    root.setLevel(level)


def test_parse_level() -> None:
    assert parse_level("debug") == logging.DEBUG
    assert parse_level(" INFO ") == logging.INFO
    assert parse_level(30) == 30
    with pytest.raises(ValueError, match="unknown log level"):
        parse_level("loud")


def test_json_lines_with_context_static_fields_and_debug_filtered() -> None:
    out = BytesOut()
    configure_logging("INFO", stream=out, static={"worker": "tools"}, cache_loggers=False)
    log = structlog.get_logger("test")
    assert not debug_enabled()
    with message_context(session_id="s-1", uuid="u-1", tool_use_id=None):
        log.debug("entry_handled", entry_id="1-0")
        log.info("tool_executed", tool="Bash", duration_s=0.5)
    log.info("after")
    lines = out.lines()
    assert [line["event"] for line in lines] == ["tool_executed", "after"]
    first = lines[0]
    assert first["session_id"] == "s-1"
    assert first["uuid"] == "u-1"
    assert "tool_use_id" not in first
    assert first["worker"] == "tools"
    assert first["level"] == "info"
    assert "timestamp" in first
    assert "session_id" not in lines[1]


def test_debug_level_emits_per_message_lines() -> None:
    out = BytesOut()
    configure_logging("DEBUG", stream=out, cache_loggers=False)
    assert debug_enabled()
    structlog.get_logger().debug("entry_handled", entry_id="1-0")
    assert out.lines()[0]["event"] == "entry_handled"


def test_text_stream_without_buffer_still_gets_json() -> None:
    out = TextOut()
    configure_logging("INFO", stream=out, cache_loggers=False)
    structlog.get_logger().info("hello", n=1)
    assert orjson.loads(out.getvalue().splitlines()[0])["n"] == 1


def test_console_renderer_on_a_terminal() -> None:
    out = Terminal()
    configure_logging("INFO", stream=out, cache_loggers=False)
    structlog.get_logger().info("hello", n=1)
    text = out.getvalue()
    assert "hello" in text
    assert "n=1" in text
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(text.splitlines()[0])


def test_stdlib_loggers_share_the_format() -> None:
    out = BytesOut()
    configure_logging("INFO", stream=out, cache_loggers=False)
    logging.getLogger("uvicorn.error").warning("broker %s", "down")
    (line,) = out.lines()
    assert line["event"] == "broker down"
    assert line["logger"] == "uvicorn.error"
    assert line["level"] == "warning"


def test_bind_and_clear_message_context() -> None:
    bind_message(session_id="s", uuid="u", tool_use_id="toolu_1", entry_id="1-1")
    assert structlog.contextvars.get_contextvars() == {
        "session_id": "s",
        "uuid": "u",
        "tool_use_id": "toolu_1",
        "entry_id": "1-1",
    }
    clear_message_context()
    assert structlog.contextvars.get_contextvars() == {}


def test_one_batch_line_carries_trace_ids_bound_by_a_span() -> None:
    out = BytesOut()
    configure_logging("INFO", stream=out, cache_loggers=False)
    log = structlog.get_logger()
    with WorkerTracer("ingestion").start("ingest", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"):
        log_batch(log, stream="ingress", size=10, duration_s=0.0012345678)
    (line,) = out.lines()
    assert line["event"] == "batch_handled"
    assert line["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert line["size"] == 10
    assert line["duration_s"] == 0.001235
