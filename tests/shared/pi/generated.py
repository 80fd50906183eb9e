"""pi sessions the suite makes itself (the end-to-end tests run without the corpus too): tool rounds with
parallel calls, a failed turn with calls (P5.6 b), a bash escape, model/thinking changes, a custom message,
a compaction (P8.6), and a late result — a bash escape between a call and its result (P9.2)."""

from __future__ import annotations

from collections.abc import Callable

from tests.shared.pi.builders import a, entry, header, session_file, tc, text, tr, u

BASH = {"role": "bashExecution", "command": "ls", "output": "a\nb", "exitCode": 0, "cancelled": False,
        "truncated": False, "timestamp": 5}  # fmt: skip


def tool_rounds() -> bytes:
    return session_file(
        header("gen-rounds"),
        entry("m1", None, kind="model_change", provider="anthropic", modelId="claude-opus-4-5"),
        entry("e1", "m1", u("list files")),
        entry("e2", "e1", a(text("two calls"), tc("toolu_1"), tc("toolu_2", command="pwd"))),
        entry("e3", "e2", tr("toolu_1", "a b")),
        entry("e4", "e3", tr("toolu_2", "/proj")),
        entry("e5", "e4", a(text("done"), stop="stop")),
        entry("t1", "e5", kind="thinking_level_change", thinkingLevel="high"),
        entry("e6", "t1", u("and now?")),
        entry("e7", "e6", a(tc("toolu_3"))),
        entry("e8", "e7", tr("toolu_3", "failed", error=True)),
        entry("e9", "e8", a(text("it failed"), stop="stop")),
    )


def failed_turns_and_compaction() -> bytes:
    return session_file(
        header("gen-failed"),
        entry("e1", None, u("first")),
        entry("e2", "e1", a(text("old answer"), stop="stop")),
        entry("c1", "e2", kind="compaction", summary="the user said first", firstKeptEntryId="e2", tokensBefore=10),
        entry("e3", "c1", u("go")),
        entry("e4", "e3", a(tc("toolu_4"), tc("toolu_5"), stop="aborted", errorMessage="Request was aborted.")),
        entry("e5", "e4", u("again")),
        entry("e6", "e5", BASH),
        entry("x1", "e6", kind="custom_message", customType="note", content="a note", display=True),
        entry("e7", "x1", a(tc("toolu_6"))),
        entry("e8", "e7", tr("toolu_6", "ok")),
        entry("e9", "e8", a(text("fine"), stop="stop")),
    )


def late_result() -> bytes:
    """P9.2's shape: the user's ``!cmd`` landed between a call and its result."""
    return session_file(
        header("gen-late"),
        entry("e1", None, u("run it")),
        entry("e2", "e1", a(tc("toolu_7"))),
        entry("e3", "e2", BASH),
        entry("e4", "e3", tr("toolu_7", "late")),
        entry("e5", "e4", a(text("ok"), stop="stop")),
    )


GENERATED_PI_SESSIONS: dict[str, Callable[[], bytes]] = {
    "tool_rounds": tool_rounds,
    "failed_turns_and_compaction": failed_turns_and_compaction,
    "late_result": late_result,
}
