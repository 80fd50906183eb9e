"""The console's view-model rules (pure): which state a session is listed under, how the sessions pages are
cut, what the session page shows for each event, and who may do what."""

from __future__ import annotations

from agentbus_redis.views.access import (
    ROLE_ACTIONS,
    Role,
    csrf_ok,
    csrf_token,
    login_cookie,
    role_of_cookie,
    role_of_token,
)
from agentbus_redis.views.paging import BadCursor, IndexRow, comes_after, decode_cursor, encode_cursor, merge_page
from agentbus_redis.views.rows import MAX_TEXT_CHARS, Row, delta_row, fresh_delta, message_rows
from agentbus_redis.views.states import (
    RUNNING_STATES,
    SESSION_FILTERS,
    SESSION_STATES,
    SessionFilter,
    SessionState,
    session_state,
    states_of_filter,
)

__all__ = [
    "MAX_TEXT_CHARS",
    "ROLE_ACTIONS",
    "RUNNING_STATES",
    "SESSION_FILTERS",
    "SESSION_STATES",
    "BadCursor",
    "IndexRow",
    "Role",
    "Row",
    "SessionFilter",
    "SessionState",
    "comes_after",
    "csrf_ok",
    "csrf_token",
    "decode_cursor",
    "delta_row",
    "encode_cursor",
    "fresh_delta",
    "login_cookie",
    "merge_page",
    "message_rows",
    "role_of_cookie",
    "role_of_token",
    "session_state",
    "states_of_filter",
]
