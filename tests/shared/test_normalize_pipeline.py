"""``to_api_request``: tombstones → compact boundary → prompt → user context → R4.1–R4.21 →
R4.22–R4.23 → safety finalizer → params; the result is always accepted by the validator."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from agentbus_redis.api.validation import validate_api_request
from agentbus_redis.clock import FixedClock
from agentbus_redis.ids import SequentialIds
from agentbus_redis.messages.content import ContentBlock, UnknownBlock
from agentbus_redis.messages.factories import create_compact_boundary_message, create_local_command_message
from agentbus_redis.messages.kinds import Message, TombstoneMessage, parse_message
from agentbus_redis.normalize import NormalizedRequest, NormalizeOptions, RepairKind, to_api_request, validate_request
from agentbus_redis.normalize.pipeline import user_context_text
from tests.shared.normalize_builders import (
    assistant,
    attachment,
    image,
    server_result,
    server_use,
    text,
    thinking,
    tool_reference,
    tool_result,
    tool_use,
    user,
)


def _request(history: list[Message], **kwargs: object) -> NormalizedRequest:
    return to_api_request(history, clock=FixedClock(), ids=SequentialIds(10_000), **kwargs)  # type: ignore[arg-type]


def test_r6_tombstoned_partials_never_reach_the_api() -> None:
    """R6: a tombstoned partial assistant (bad signature from a failed stream) is removed first."""
    partial = assistant(thinking("half", "stale-sig"), msg_id="m1")
    retry = assistant(thinking("full", "good-sig"), text("answer"), msg_id="m2")
    result = _request([user("q"), partial, TombstoneMessage(message=partial), retry], prompt="thanks")
    contents = [m["content"] for m in result.request["messages"]]
    assert contents[1] == [
        {"type": "thinking", "thinking": "full", "signature": "good-sig"},
        {"type": "text", "text": "answer"},
    ]


def test_r4_24a_slice_from_last_compact_boundary() -> None:
    """R4.24a: only messages from the last compact boundary on are sent (the boundary itself is
    dropped by R4.4); ``from_last_compact_boundary=False`` sends everything."""
    boundary = create_compact_boundary_message("auto", 1000, clock=FixedClock(), ids=SequentialIds(1))
    history: list[Message] = [
        user("old"),
        assistant(text("old answer")),
        boundary,
        user("summary"),
        assistant(text("ok")),
    ]
    sliced = _request(history, prompt="next")
    assert [m["content"] for m in sliced.request["messages"]] == ["summary", [{"type": "text", "text": "ok"}], "next"]
    full = _request(history, prompt="next", options=NormalizeOptions(from_last_compact_boundary=False))
    assert len(full.request["messages"]) == 5


def test_r4_24c_user_context_prepended_exactly() -> None:
    """R4.24c: a meta user message with the context reminder goes first (byte-exact text, including
    the six-space indent before IMPORTANT); it then merges with the first user message (R4.10)."""
    expected = (
        "<system-reminder>\nAs you answer the user's questions, you can use the following context:\n"
        "# claudeMd\nBe terse.\n# currentDate\nToday's date is 2026-01-01.\n\n"
        "      IMPORTANT: this context may or may not be relevant to your tasks. You should not respond to this "
        "context unless it is highly relevant to your task.\n</system-reminder>\n"
    )
    context = {"claudeMd": "Be terse.", "currentDate": "Today's date is 2026-01-01."}
    assert user_context_text(context) == expected
    result = _request([], prompt="hello", options=NormalizeOptions(user_context=context))
    assert result.request["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": expected + "\n"}, {"type": "text", "text": "hello"}]}
    ]
    assert _request([], prompt="hello", options=NormalizeOptions(user_context={})).request["messages"] == [
        {"role": "user", "content": "hello"}
    ]


def test_prompt_after_interrupted_tool_turn() -> None:
    """A prompt typed after resuming an interrupted tool turn: the missing result is a placeholder
    (R4.29) and the prompt merges into that message (R4.10), so the request is valid and ends on user."""
    result = _request([user("run it"), assistant(tool_use("toolu_1"))], prompt="continue")
    last = result.request["messages"][-1]
    assert last == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "content": "[Tool result missing due to internal error]",
                "is_error": True,
            },
            {"type": "text", "text": "continue"},
        ],
    }
    assert result.report.count(RepairKind.PLACEHOLDER_TOOL_RESULT_INSERTED) == 1
    assert result.report.pairing is not None
    assert result.report.pairing.repaired
    assert validate_api_request(result.request) == []


def test_report_counts_by_kind_for_metrics() -> None:
    """The report counts repairs by kind (metric label → count) across all stages."""
    history: list[Message] = [
        attachment({"type": "mystery"}),
        user("q"),
        assistant(tool_use("bad.id"), text("")),
        user([tool_result("bad.id")]),
    ]
    result = _request(history, prompt="go")
    assert result.report.counts == {
        "attachment_unconverted": 1,
        "blank_text_dropped": 1,
        "tool_id_rewritten": 2,
    }
    assert validate_api_request(result.request) == []


def _corpus_histories(corpus_root: Path) -> list[tuple[str, list[Message]]]:
    histories: list[tuple[str, list[Message]]] = []
    for path in sorted((corpus_root / "claude-code").rglob("*.jsonl")):
        messages: list[Message] = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not isinstance(data, dict):
                continue
            try:
                messages.append(parse_message(data))
            except ValidationError:
                continue  # metadata lines (summary, file-history-snapshot…) and malformed lines
        histories.append((str(path.relative_to(corpus_root)), messages))
    return histories


def test_corpus_every_transcript_normalizes_to_a_valid_request(corpus_root: Path) -> None:
    """Every Claude Code transcript of the corpus, in file order and resumed with ``continue``, becomes
    a request the validator accepts."""
    histories = _corpus_histories(corpus_root)
    assert len(histories) >= 20
    failures: dict[str, list[str]] = {}
    for name, messages in histories:
        result = to_api_request(messages, prompt="continue", clock=FixedClock(), ids=SequentialIds())
        violations = validate_api_request(result.request)
        if violations:
            failures[name] = [f"{v.rule}: {v.detail[:160]}" for v in violations]
    assert failures == {}


# --- property: whatever the history, the request is valid ------------------------------------------

_ids = st.sampled_from(["toolu_1", "toolu_2", "toolu_3", "bad id", ""])
_texts = st.sampled_from(["hi", "", "  ", "\n", "done ", "<system-reminder>\nx\n</system-reminder>"])
_user_blocks: st.SearchStrategy[ContentBlock] = st.one_of(
    _texts.map(text),
    _ids.map(lambda i: tool_result(i, "out")),
    _ids.map(lambda i: tool_result(i, [text(""), image()], is_error=True)),
    st.just(image()),
    st.just(UnknownBlock.model_validate({"type": "tool_result", "content": "no id"})),
    _ids.map(lambda i: tool_result(i, [tool_reference("Grep"), text("x")])),
)
_assistant_blocks: st.SearchStrategy[ContentBlock] = st.one_of(
    _texts.map(text),
    _ids.map(tool_use),
    st.sampled_from([None, "", "sig", "[REDACTED_SIGNATURE]"]).map(lambda s: thinking("t", s)),
    st.just(server_use("srvtoolu_1")),
    st.just(server_result("srvtoolu_1")),
    st.just(UnknownBlock.model_validate({"type": "fallback"})),
    st.just(server_use("srvtoolu_2", "advisor")),
    st.just(server_result("srvtoolu_2", "advisor_tool_result")),
)
_messages: st.SearchStrategy[Message] = st.one_of(
    st.lists(_user_blocks, max_size=4).map(user),
    _texts.map(user),
    st.tuples(
        st.lists(_assistant_blocks, max_size=4),
        st.sampled_from(["m1", "m2", "m3"]),
        st.sampled_from(["claude-sonnet-4-5", "claude-opus-4-1", "<synthetic>"]),
    ).map(lambda triple: assistant(*triple[0], msg_id=triple[1], model=triple[2])),
    _texts.map(lambda t: create_local_command_message(t, clock=FixedClock(), ids=SequentialIds(77))),
    st.sampled_from(["todo_reminder", "queued_command", "hook_success", "weird"]).map(
        lambda kind: attachment({"type": kind, "prompt": "p", "content": [], "hookEvent": "SessionStart"})
    ),
)


_options = st.builds(
    NormalizeOptions,
    tool_search_enabled=st.booleans(),
    chair_sermon=st.booleans(),
    toolref_defer=st.booleans(),
    snip=st.booleans(),
    target_model=st.sampled_from([None, "claude-sonnet-4-5", "claude-opus-4-1"]),
    thinking_enabled=st.sampled_from([False, None]),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=st.lists(_messages, max_size=8), prompt=st.sampled_from([None, "continue"]), options=_options)
def test_api_3_any_history_yields_a_valid_request(
    history: list[Message], prompt: str | None, options: NormalizeOptions
) -> None:
    """API §3: random histories mixing every broken shape, under any gate combination, still produce a
    valid request (a final assistant is allowed only without a prompt, as prefill)."""
    result = _request(history, prompt=prompt, options=options)
    violations = validate_request(result.request, options=options, allow_prefill=prompt is None)
    assert violations == [], (violations, result.request)
