"""Issue 15: a transcript line that is a JSON object with a ``uuid`` never breaks the parent chain.

Claude Code 1.0.x wrote hook progress as ``system`` lines without ``subtype`` (``level``, ``toolUseID``,
ANSI text); they were refused as malformed, so every resume stopped at the last one. R7.14 maps every
transcript message by uuid whatever its shape: such lines are :class:`OtherSystemMessage` (no subtype)
or, when their model refuses them, :class:`OtherMessageLine`, walked through by the chain (R7.18) and
resume (R7.20), dumped back unchanged, and never sent to the API (R4.4).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentbus_redis.api.validation import validate_api_request
from agentbus_redis.clock import FixedClock
from agentbus_redis.ids import SequentialIds
from agentbus_redis.messages.kinds import AssistantMessage, UserMessage
from agentbus_redis.messages.system import OtherSystemMessage
from agentbus_redis.normalize import to_api_request
from agentbus_redis.transcript import (
    OtherMessageLine,
    build_transcript,
    dump_line,
    main_chain,
    model_refusal,
    parse_line,
    read_transcript,
    remove_chain_fields,
    resume_session,
    verify_transcript,
)
from tests.shared.transcript_builders import (
    CLAUDE_CODE_CORPUS,
    assistant,
    corpus_files,
    envelope,
    jsonl,
    text,
    tool_result,
    tool_use,
    user,
)


def hook_line(uuid: str, parent: str, second: int, hook: str = "PostToolUse:Bash") -> dict[str, Any]:
    """A 1.0.x hook progress line: ``type: system`` with no ``subtype`` (shape of v1.0.64–1.0.98 files)."""
    return {
        **envelope(uuid, parent, second, version="1.0.64", userType="external", gitBranch="main"),
        "type": "system",
        "content": f"\u001b[1m{hook}\u001b[22m [~/.claude/hooks/notify.sh] completed successfully",
        "isMeta": False,
        "toolUseID": f"toolu_{uuid}",
        "level": "info",
    }


def old_session(turns: int) -> str:
    """``turns`` × (user → assistant tool_use → hook line → tool_result → assistant text → Stop hook line)."""
    lines: list[dict[str, Any]] = []
    parent: str | None = None
    for turn in range(turns):
        second = turn * 6
        u, a, h, r, a2, s = (f"{kind}{turn}" for kind in ("u", "a", "h", "r", "b", "s"))
        lines += [
            user(u, parent, f"prompt {turn}", second=second),
            assistant(a, u, [tool_use(f"t{turn}")], second=second + 1),
            hook_line(h, a, second + 2),
            user(r, h, [tool_result(f"t{turn}")], second=second + 3, sourceToolAssistantUUID=a),
            assistant(a2, r, [text(f"done {turn}")], second=second + 4),
            hook_line(s, a2, second + 5, hook="Stop"),
        ]
        parent = s
    return jsonl(*lines)


def resume(data: str | bytes) -> Any:
    return resume_session(data, clock=FixedClock(), ids=SequentialIds())


def test_issue15_system_line_without_subtype_is_an_other_system_message_and_dumps_back_unchanged() -> None:
    raw = json.dumps(hook_line("h1", "a1", 3), separators=(",", ":"), ensure_ascii=False)
    line = parse_line(raw, 1)
    assert isinstance(line, OtherSystemMessage)
    assert line.subtype is None
    assert line.level == "info"
    assert line.tool_use_id == "toolu_h1"
    assert json.loads(dump_line(line)) == json.loads(raw)


def test_issue15_r7_18_old_session_resumes_whole_through_subtype_less_system_lines() -> None:
    """Before: the chain stopped at the last hook line (a resume of 8 turns kept 1 turn)."""
    data = old_session(8)
    parse = read_transcript(data)
    assert parse.errors == ()
    chain = main_chain(build_transcript(parse), "jsonl_path")
    assert len(chain) == 8 * 6 - 1  # the leaf is the last assistant; the trailing Stop hook line follows it
    result = resume(data)
    conversation = [m for m in result.messages if isinstance(m, UserMessage | AssistantMessage)]
    assert len(conversation) == 8 * 4
    assert verify_transcript(parse).ok


def test_issue15_r4_4_subtype_less_system_lines_never_reach_the_api() -> None:
    result = resume(old_session(3))
    body = to_api_request(result.messages, prompt="next", clock=FixedClock(), ids=SequentialIds()).request
    assert validate_api_request(body) == []
    assert "completed successfully" not in json.dumps(body)
    assert [message["role"] for message in body["messages"]] == ["user", "assistant"] * 6 + ["user"]


@pytest.mark.parametrize(
    ("name", "broken"),
    [
        ("no timestamp", lambda line: {k: v for k, v in line.items() if k != "timestamp"}),
        ("message is a string", lambda line: line | {"message": "error"}),
        ("content typo", lambda line: line | {"message": {"role": "user", "contenst": "x"}}),
        ("system content is a list", lambda line: line | {"type": "system", "content": [1]}),
        (
            "known subtype, wrong field type",
            lambda line: line | {"type": "system", "subtype": "local_command", "level": 5},
        ),
        ("future attachment without payload", lambda line: line | {"type": "attachment"}),
    ],
)
def test_issue15_r7_14_a_refused_shape_with_a_uuid_is_kept_walked_through_and_skipped_for_the_api(
    name: str, broken: Any
) -> None:
    middle = broken(user("x1", "a1", "lost?", second=2))
    data = jsonl(
        user("u1", None, "first", second=0),
        assistant("a1", "u1", [text("one")], second=1),
        middle,
        user("u2", "x1", "second", second=3),
        assistant("a2", "u2", [text("two")], second=4),
    )
    parse = read_transcript(data)
    assert parse.errors == (), name
    other = parse.lines[2].line
    assert isinstance(other, OtherMessageLine), name
    assert other.to_wire() == middle  # lossless
    assert json.loads(dump_line(other)) == middle
    assert model_refusal(other), name
    result = resume(data)
    assert [m.uuid for m in result.messages] == ["u1", "a1", "u2", "a2"], name
    assert [line.uuid for line in result.skipped_lines] == ["x1"]
    body = to_api_request(result.messages, prompt="next", clock=FixedClock(), ids=SequentialIds()).request
    assert validate_api_request(body) == []
    assert "lost?" not in json.dumps(body)
    (issue,) = verify_transcript(parse).of_kind("other_shape")
    assert issue.line_numbers == (3,)
    assert issue.severity == "warning"


def test_issue15_r7_16_an_other_shaped_progress_line_is_bridged_like_progress() -> None:
    data = jsonl(
        user("u1", None, "first", second=0),
        assistant("a1", "u1", [text("one")], second=1),
        {"type": "progress", **envelope("p1", "a1", 2)},  # no ``data``
        user("u2", "p1", "second", second=3),
    )
    transcript = build_transcript(read_transcript(data))
    assert "p1" not in transcript.messages
    assert transcript.messages["u2"].parent_uuid == "a1"


def test_issue15_a_line_whose_own_link_is_unreadable_stays_malformed() -> None:
    """Without a string uuid (or with a non-string parentUuid) there is no link to walk."""
    parse = read_transcript(jsonl({"type": "user", "message": "x"}, {"type": "user", "uuid": "u", "parentUuid": 3}))
    assert [(error.line_number, error.kind) for error in parse.errors] == [
        (1, "invalid_message"),
        (2, "invalid_message"),
    ]


def test_issue15_no_corpus_line_with_a_uuid_is_malformed(corpus_root: Path) -> None:
    """Every corpus line that is a JSON object with a string uuid parses (none breaks its chain)."""
    checked = 0
    for path in corpus_files(corpus_root):
        parse = read_transcript(path.read_bytes())
        for error in parse.errors:
            try:
                value = json.loads(error.raw)
            except ValueError:
                continue
            where = f"{path.relative_to(corpus_root / CLAUDE_CODE_CORPUS)}:{error.line_number}"
            assert not (isinstance(value, dict) and isinstance(value.get("uuid"), str)), where
        checked += len(parse.lines)
    assert checked > 2500


def test_issue15_r1_8_an_image_without_source_does_not_cost_its_message_the_api() -> None:
    """Only the block is unusable: it is kept verbatim (UnknownBlock), the message stays a UserMessage."""
    data = jsonl(
        user("u1", None, [text("look at this"), {"type": "image"}], second=0),
        assistant("a1", "u1", [text("I see no image")], second=1),
    )
    parse = read_transcript(data)
    assert isinstance(parse.lines[0].line, UserMessage)
    assert parse.lines[0].line.to_wire()["message"]["content"][1] == {"type": "image"}
    result = resume(data)
    body = to_api_request(result.messages, prompt="next", clock=FixedClock(), ids=SequentialIds()).request
    assert validate_api_request(body) == []
    assert body["messages"][0]["content"] == [{"type": "text", "text": "look at this"}]


def test_issue15_r7_19_remove_chain_fields_on_an_other_shaped_line_drops_only_the_chain_keys() -> None:
    raw = user("x1", "a1", "x", second=2) | {"message": "error"}
    (line,) = read_transcript(jsonl(raw)).entries
    assert isinstance(line, OtherMessageLine)
    (stripped,) = remove_chain_fields([line])
    assert stripped.to_wire() == {k: v for k, v in raw.items() if k not in {"parentUuid", "isSidechain"}}
    assert line.to_wire() == raw  # the original is untouched
