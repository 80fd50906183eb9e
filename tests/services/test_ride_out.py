"""runtime/ride_out.py: which errors are ridden out, for how long, and the one error after."""

from __future__ import annotations

import pytest
from redis.exceptions import ClusterDownError, ReadOnlyError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError

from agentbus_redis.cli.errors import explain
from agentbus_redis.runtime.ride_out import RedisUnavailable, ride_out


class Flaky:
    """Fails with ``errors`` in turn, then answers ``"ok"``."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


async def test_transient_errors_are_retried_until_the_call_lands() -> None:
    call = Flaky(RedisConnectionError("Connection closed by server."), ClusterDownError("down"), ReadOnlyError("ro"))
    assert await ride_out(call, bound_s=30, what="test") == "ok"
    assert call.calls == 4


async def test_an_error_that_is_not_an_outage_is_raised_at_once() -> None:
    call = Flaky(ResponseError("WRONGTYPE"))
    with pytest.raises(ResponseError):
        await ride_out(call, bound_s=30, what="test")
    assert call.calls == 1


async def test_past_the_bound_one_redis_unavailable_naming_what_and_why() -> None:
    call = Flaky(*[RedisConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused.")] * 1000)
    with pytest.raises(RedisUnavailable) as raised:
        await ride_out(call, bound_s=0.2, what="publish user_prompt (key k1) to s1")
    error = raised.value
    assert str(error).startswith("publish user_prompt (key k1) to s1: Redis unavailable for 0.2s (ConnectionError: ")
    assert isinstance(error.__cause__, RedisConnectionError)
    assert 1 < call.calls < 1000


def test_the_cli_prints_the_line_of_the_last_redis_error_and_the_time_it_retried() -> None:
    cause = RedisConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused.")
    error = RedisUnavailable("publish", 60, cause)
    error.__cause__ = cause
    explained = explain(error)
    assert explained is not None
    assert str(explained).startswith("cannot reach Redis at ")
    assert str(explained).endswith("(retried for 60s)")
