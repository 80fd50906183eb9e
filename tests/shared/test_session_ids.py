"""Issue 15, session ids are checked: the one grammar (session_ids.py) every entry point and
every path-building function uses."""

from __future__ import annotations

import pytest

from agentbus_redis.errors import AgentbusError
from agentbus_redis.session_ids import InvalidSessionId, check_session_id, session_id_problem


@pytest.mark.parametrize(
    "session_id",
    [
        "504d6d3b-cdb2-4e03-b956-6dbb2814de1b",
        "s1",
        "dlq-good-0",
        "team.agent:run_7",
        "a" * 128,
        "...",
        ".hidden",
        "a..b",
    ],
)
def test_valid_session_ids_pass(session_id: str) -> None:
    assert session_id_problem(session_id) is None
    assert check_session_id(session_id) == session_id


@pytest.mark.parametrize(
    ("session_id", "problem"),
    [
        ("", "empty"),
        (".", "directories"),
        ("..", "directories"),
        ("../../escape-test", "'/'"),
        ("a/b", "'/'"),
        ("a\\b", "'\\\\'"),
        ("line\nbreak", "'\\n'"),
        ("esc\x1b[31m", "'\\x1b'"),
        ("nul\x00", "'\\x00'"),
        ("with space", "' '"),
        ("café", "'é'"),
        ("a" * 129, "129 characters"),
        ("é" * 128 + "a", "129 characters"),
        ("x" * 300, "300 characters"),
    ],
)
def test_invalid_session_ids_are_refused_with_a_typed_error(session_id: str, problem: str) -> None:
    found = session_id_problem(session_id)
    assert found is not None
    assert problem in found
    with pytest.raises(InvalidSessionId) as caught:
        check_session_id(session_id)
    assert caught.value.session_id == session_id
    assert caught.value.problem == found
    assert isinstance(caught.value, AgentbusError | ValueError)
