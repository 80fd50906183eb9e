"""The console's pure rules: the state a session is listed under, cursor paging over several indexes,
display rows of log entries, and the access tokens."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentbus_redis.approvals.ledger import ApprovalBook
from agentbus_redis.bus.events import AssistantReply, IngressEnvelope, UserPrompt
from agentbus_redis.bus.ledger import LedgerState, PendingToolUse, SessionLedger, new_ledger_state
from agentbus_redis.clock import FixedClock
from agentbus_redis.ids import SequentialIds
from agentbus_redis.messages.content import TextBlock
from agentbus_redis.messages.factories import create_assistant_api_error_message, create_assistant_message
from agentbus_redis.views import (
    BadCursor,
    IndexRow,
    csrf_ok,
    csrf_token,
    decode_cursor,
    encode_cursor,
    fresh_delta,
    login_cookie,
    merge_page,
    message_rows,
    role_of_cookie,
    role_of_token,
    session_state,
    states_of_filter,
)


def test_a_session_is_listed_by_what_its_turn_waits_for_first() -> None:
    state = LedgerState(session_id="s")
    assert session_state(state) == "ended"
    state.last_turn_failed = True
    assert session_state(state) == "failed"
    state.awaiting_model = True
    assert session_state(state) == "waiting_model"
    state.pending["toolu_1"] = PendingToolUse(assistant_uuid="a", deadline_ms=1, name="Bash")
    assert session_state(state) == "waiting_tool"


def test_an_approval_comes_before_the_calls(approval_state: LedgerState) -> None:
    assert session_state(approval_state) == "waiting_approval"


@pytest.fixture
def approval_state() -> LedgerState:
    book = ApprovalBook.model_validate(
        {
            "pending": {
                "ap_1": {
                    "park_id": "p1",
                    "tool_use": {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}},
                    "deadline_ms": 2,
                    "timeout_s": 1.0,
                }
            }
        }
    )
    state = LedgerState(session_id="s", approvals=book)
    state.pending["toolu_1"] = PendingToolUse(assistant_uuid="a", deadline_ms=1, name="Bash")
    return state


def test_filters_name_their_states() -> None:
    assert states_of_filter("all") is None
    assert states_of_filter("running") == ("waiting_model", "waiting_tool", "waiting_approval")
    assert states_of_filter("failed") == ("failed",)


def test_a_cursor_round_trips_and_a_forged_one_is_refused() -> None:
    row = IndexRow(1712345678901, "session:with-colons:1")
    assert decode_cursor(encode_cursor(row)) == row
    with pytest.raises(BadCursor):
        decode_cursor("not a cursor!")


rows_strategy = st.lists(
    st.tuples(st.integers(0, 5), st.text("abcdef", min_size=1, max_size=3)), unique_by=lambda t: t[1], max_size=40
)


@given(rows=rows_strategy, limit=st.integers(1, 7), indexes=st.integers(1, 4))
def test_paging_lists_every_row_once_newest_first(rows: list[tuple[int, str]], limit: int, indexes: int) -> None:
    """Whatever the ties and however the rows are spread over the indexes, following the cursors lists each
    row exactly once, in (score, member) descending order."""
    all_rows = [IndexRow(score, member) for score, member in rows]
    spread = [sorted(all_rows[i::indexes], reverse=True) for i in range(indexes)]
    seen: list[IndexRow] = []
    cursor = None
    while True:
        after = decode_cursor(cursor) if cursor else None
        candidates = [[r for r in index if after is None or r < after][: limit + 1] for index in spread]
        page, cursor = merge_page(candidates, after=after, limit=limit)
        seen += page
        if cursor is None:
            break
    assert seen == sorted(all_rows, reverse=True)


def test_message_rows_keep_model_text_as_text() -> None:
    hostile = "<script>alert(1)</script>"
    rows = message_rows(
        3,
        {
            "type": "assistant",
            "uuid": "u1",
            "message": {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": hostile},
                    {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}},
                ],
            },
        },
    )
    assert rows == [
        {"seq": 3, "uuid": "u1", "kind": "text", "text": hostile},
        {"seq": 3, "uuid": "u1", "kind": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}},
    ]


def test_message_rows_of_results_errors_and_tombstones() -> None:
    result = message_rows(
        4,
        {
            "type": "user",
            "uuid": "u2",
            "message": {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "boom", "is_error": True}],
            },
        },
    )
    assert result == [
        {"seq": 4, "uuid": "u2", "kind": "tool_result", "tool_use_id": "toolu_1", "text": "boom", "is_error": True}
    ]
    error = message_rows(
        5,
        {
            "type": "assistant",
            "uuid": "u3",
            "isApiErrorMessage": True,
            "message": {"role": "assistant", "content": [{"type": "text", "text": "API Error: 500"}]},
        },
    )
    assert error == [{"seq": 5, "uuid": "u3", "kind": "api_error", "text": "API Error: 500"}]
    tombstone = message_rows(6, {"type": "tombstone", "message": {"uuid": "u1"}})
    assert tombstone == [{"seq": 6, "uuid": None, "kind": "tombstone", "retracts": "u1"}]


def test_a_delta_of_a_block_logged_since_is_stale() -> None:
    assert fresh_delta(after_seq=7, logged_seq=7)
    assert not fresh_delta(after_seq=6, logged_seq=7)


def test_tokens_roles_cookies_and_csrf() -> None:
    tokens = {"operator": "op-secret", "read_only": "ro-secret"}
    assert role_of_token("op-secret", tokens) == "operator"
    assert role_of_token("ro-secret", tokens) == "read_only"
    assert role_of_token("guess", tokens) is None
    cookie = login_cookie("ro-secret", "read_only")
    assert "ro-secret" not in cookie
    assert role_of_cookie(cookie, tokens) == ("read_only", "ro-secret")
    assert role_of_cookie(login_cookie("old", "operator"), tokens) is None
    assert csrf_ok(csrf_token(cookie, "ro-secret"), cookie, "ro-secret")
    assert not csrf_ok(None, cookie, "ro-secret")
    assert not csrf_ok(csrf_token(cookie, "op-secret"), cookie, "ro-secret")


def test_a_turn_that_ends_with_an_api_error_is_listed_failed_until_the_next_prompt() -> None:
    """The ledger's ``last_turn_failed`` (bus/turn_state.py): set by an M7 API error message, cleared by a prompt."""
    ledger = SessionLedger(new_ledger_state("s1"), clock=FixedClock(), ids=SequentialIds(1))

    def send(payload: object, key: str) -> None:
        ledger.apply(IngressEnvelope(session_id="s1", idempotency_key=key, payload=payload), now_ms=1)  # type: ignore[arg-type]

    send(UserPrompt(content="hi"), "k1")
    assert session_state(ledger.state) == "waiting_model"
    send(AssistantReply(message=create_assistant_api_error_message("API Error: 500 boom")), "k2")
    assert session_state(ledger.state) == "failed"
    send(UserPrompt(content="again"), "k3")
    assert session_state(ledger.state) == "waiting_model"
    send(AssistantReply(message=create_assistant_message([TextBlock(text="fine")])), "k4")
    assert session_state(ledger.state) == "ended"
