"""Issue 15, size limits: the ingress entry size rule (bus/ingress_limits.py)."""

from __future__ import annotations

from agentbus_redis.bus.ingress_limits import DEFAULT_MAX_INGRESS_ENTRY_BYTES, IngressEntryTooLarge, entry_size_problem


def test_default_limit_is_the_messages_api_request_limit() -> None:
    """agent-loop.md M1.9: the Messages API refuses requests over 32 MB (413 request_too_large)."""
    assert DEFAULT_MAX_INGRESS_ENTRY_BYTES == 32 * 1024 * 1024


def test_an_entry_at_the_limit_fits_one_byte_more_does_not() -> None:
    assert entry_size_problem(1000, 1000) is None
    problem = entry_size_problem(1001, 1000)
    assert problem is not None
    assert "1001 bytes" in problem
    assert "1000 bytes" in problem


def test_too_large_error_names_session_size_and_limit() -> None:
    error = IngressEntryTooLarge("s1", 2000, 1000)
    assert (error.session_id, error.size, error.limit) == ("s1", 2000, 1000)
    assert "s1" in str(error)
    assert "2000" in str(error)
