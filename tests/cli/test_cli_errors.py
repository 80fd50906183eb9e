"""Issue 16, "errors a person can read": every expected failure of a bus command is one line on stderr
naming what and where, with exit code 1 (2 for usage); a traceback only with ``--debug``."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis.exceptions import AuthenticationError, ConnectionError, ResponseError

from agentbus_redis.cli.errors import CliError, CliUsageError, explain, redacted_url
from agentbus_redis.errors import TranscriptError
from agentbus_redis.local.redis_server import free_port
from agentbus_redis.streams.deadletter import DeadLetterDecodeError
from tests.cli.process import agentbus, cli_env

TRANSCRIPT = (
    '{"type":"user","uuid":"u1","parentUuid":null,"sessionId":"s","timestamp":"2025-01-01T00:00:00Z",'
    '"message":{"role":"user","content":"hi"}}\n'
)

BUS_COMMANDS = {
    "send": ["send", "s1", "hello"],
    "send --wait": ["send", "s1", "hello", "--wait", "--timeout", "3"],
    "tail": ["tail", "s1"],
    "tail -f": ["tail", "-f", "s1"],
    "replay": ["replay", "transcript.jsonl", "--timeout", "3"],
    "streams init": ["streams", "init"],
    "streams info": ["streams", "info"],
    "dlq ls": ["dlq", "ls"],
    "dlq show": ["dlq", "show", "agentbus:tools:jobs:dlq", "1-0"],
    "dlq replay": ["dlq", "replay", "agentbus:tools:jobs:dlq", "1-0"],
}


@pytest.fixture(scope="module")
def unreachable_url() -> str:
    """A Redis URL on a free port: nothing listens there."""
    return f"redis://127.0.0.1:{free_port()}/0"


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "transcript.jsonl").write_text(TRANSCRIPT)
    return tmp_path


@pytest.mark.parametrize("args", BUS_COMMANDS.values(), ids=BUS_COMMANDS.keys())
def test_unreachable_redis_is_one_line_naming_the_url(args: list[str], unreachable_url: str, workdir: Path) -> None:
    # No ride-out: a Redis that never answers is reported at once (the line is the same after a ride-out).
    outcome = agentbus(*args, cwd=workdir, env=cli_env(unreachable_url, AGENTBUS_REDIS_RIDE_OUT_S="0"))
    assert outcome.code == 1
    assert outcome.error_line == (
        f"agentbus: cannot reach Redis at {unreachable_url} (connection refused); start one or set REDIS_URL"
    )


def test_a_publish_that_rode_out_an_outage_says_how_long(unreachable_url: str, workdir: Path) -> None:
    outcome = agentbus("send", "s1", "hello", cwd=workdir, env=cli_env(unreachable_url, AGENTBUS_REDIS_RIDE_OUT_S="1"))
    assert outcome.code == 1
    assert outcome.error_line == (
        f"agentbus: cannot reach Redis at {unreachable_url} (connection refused); start one or set REDIS_URL "
        "(retried for 1s)"
    )


def test_the_redis_url_option_wins_and_its_password_is_not_printed(unreachable_url: str, workdir: Path) -> None:
    port = unreachable_url.split(":")[2].split("/")[0]
    secret_url = f"redis://operator:s3cret@127.0.0.1:{port}/0"
    outcome = agentbus("--redis-url", secret_url, "dlq", "ls", cwd=workdir, env=cli_env("redis://127.0.0.1:1/0"))
    assert outcome.code == 1
    assert outcome.error_line == (
        f"agentbus: cannot reach Redis at redis://operator:***@127.0.0.1:{port}/0 (connection refused); "
        "start one or set REDIS_URL"
    )


@pytest.mark.parametrize("how", ["--debug", "AGENTBUS_DEBUG=1"])
def test_debug_shows_the_traceback(how: str, unreachable_url: str, workdir: Path) -> None:
    flags, extra = (["--debug"], {}) if how == "--debug" else ([], {"AGENTBUS_DEBUG": "1"})
    outcome = agentbus(*flags, "streams", "info", cwd=workdir, env=cli_env(unreachable_url, **extra))
    assert outcome.code == 1
    assert "Traceback (most recent call last)" in outcome.stderr
    assert outcome.stderr.rstrip().splitlines()[-1].startswith("redis.exceptions.ConnectionError")


def test_a_bad_setting_names_the_field(workdir: Path, unreachable_url: str) -> None:
    outcome = agentbus("streams", "info", cwd=workdir, env=cli_env(unreachable_url, AGENTBUS_SHARDS="many"))
    assert outcome.code == 1
    assert outcome.error_line.startswith("agentbus: invalid Settings: shards: Input should be a valid integer")


def test_usage_errors_exit_2(workdir: Path, unreachable_url: str) -> None:
    env = cli_env(unreachable_url)
    unknown_worker = agentbus("worker", "nope", cwd=workdir, env=env)
    assert unknown_worker.code == 2
    assert unknown_worker.error_line == (
        "agentbus: unknown worker 'nope'; choose one of ingestion, tools, normalization, transcripts, model"
    )
    bad_id = agentbus("dlq", "show", "agentbus:tools:jobs:dlq", "latest", cwd=workdir, env=env)
    assert bad_id.code == 2
    assert bad_id.error_line == "agentbus: 'latest' is not a stream entry id (like 1712345678901-0)"
    bad_level = agentbus("--log-level", "loud", "streams", "info", cwd=workdir, env=env)
    assert bad_level.code == 2
    assert "'loud' is not one of DEBUG, INFO, WARNING, ERROR, CRITICAL" in bad_level.stderr
    missing_argument = agentbus("send", "s1", cwd=workdir, env=env)
    assert missing_argument.code == 2
    assert "Traceback" not in missing_argument.stderr


# -- the mapping table itself (no process needed) ------------------------------------------------------


def test_a_subclass_entry_wins_over_its_base() -> None:
    explained = explain(AuthenticationError("invalid username-password pair"))
    assert explained is not None
    assert "refused the credentials (invalid username-password pair)" in str(explained)
    assert "cannot reach" in str(explain(ConnectionError("Error 111 connecting to h:1. Connection refused.")))


def test_typed_errors_plug_in() -> None:
    """What other parts raise: CliError (exit 1), CliUsageError (exit 2), the library's AgentbusError."""
    usage = explain(CliUsageError("bad session id 'a b'"))
    assert usage is not None
    assert (str(usage), usage.exit_code) == ("bad session id 'a b'", 2)
    library = explain(TranscriptError("line 3: not JSON"))
    assert library is not None
    assert (str(library), library.exit_code) == ("line 3: not JSON", 1)
    assert explain(CliError("x", exit_code=3)).exit_code == 3  # type: ignore[union-attr]
    decode = explain(DeadLetterDecodeError("s:dlq", "1-0", "type is 'x'"))
    assert str(decode) == "s:dlq entry 1-0: type is 'x': not a dead letter (`agentbus dlq ls` lists them)"
    assert "refused the command: WRONGTYPE" in str(explain(ResponseError("WRONGTYPE Operation")))


def test_a_bug_is_not_an_expected_failure() -> None:
    assert explain(KeyError("seq")) is None
    assert explain(ValueError("x")) is None


def test_redacted_url() -> None:
    assert redacted_url("redis://u:pw@h:6379/0") == "redis://u:***@h:6379/0"
    assert redacted_url("redis://:pw@h/0") == "redis://:***@h/0"
    assert redacted_url("redis://h:6379/0") == "redis://h:6379/0"


def test_connect_error_reason_without_errno() -> None:
    """A name that does not resolve: redis-py gives no OSError with an errno, only its message."""
    explained = explain(ConnectionError("Error -2 connecting to nohost.invalid:6379. Name or service not known."))
    assert "(name or service not known)" in str(explained)


async def test_the_sdk_raises_what_the_table_maps(unreachable_url: str) -> None:
    client = aioredis.Redis.from_url(unreachable_url)
    with pytest.raises(ConnectionError) as caught:
        await client.get("x")
    await client.aclose()
    assert "(connection refused)" in str(explain(caught.value))
