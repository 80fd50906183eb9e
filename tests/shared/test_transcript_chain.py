"""Loading (R7.14–R7.17), leaf selection (R7.19) and the conversation chain (R7.18)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from agentbus_redis.errors import BrokenTranscriptChain
from agentbus_redis.messages.content import ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.kinds import AssistantMessage, UserMessage
from agentbus_redis.messages.system import CompactBoundarySystemMessage
from agentbus_redis.transcript import (
    Transcript,
    TranscriptMessage,
    TranscriptParse,
    build_conversation_chain,
    build_transcript,
    main_chain,
    read_transcript,
    remove_chain_fields,
    select_leaf,
    session_metadata,
    subagent_chain,
    timestamp_ms,
)
from tests.shared.transcript_builders import (
    CLAUDE_CODE_CORPUS,
    assistant,
    jsonl,
    progress,
    system,
    text,
    tool_result,
    tool_use,
    user,
)

BIG_SESSION = "marot__spotter/258c7280-ae70-4798-800f-63464d01a85d.jsonl"


def load(data: str) -> Transcript:
    parse = read_transcript(data)
    assert not parse.errors
    return build_transcript(parse)


def uuids(messages: Sequence[TranscriptMessage]) -> list[str]:
    return [message.uuid for message in messages]


def corpus(corpus_root: Path, relative: str) -> Transcript:
    return build_transcript(read_transcript((corpus_root / CLAUDE_CODE_CORPUS / relative).read_bytes()))


@pytest.fixture(scope="module")
def big_parse(corpus_root: Path) -> TranscriptParse:
    """The 2.7 MB compacted session, parsed once for this module."""
    return read_transcript((corpus_root / CLAUDE_CODE_CORPUS / BIG_SESSION).read_bytes())


# --- R7.14 ---------------------------------------------------------------------------------------


def test_r7_14_repeated_uuid_overwrites_value_but_keeps_first_position() -> None:
    transcript = load(jsonl(user("u1", None, "first"), user("u2", "u1"), user("u1", None, "second")))
    assert list(transcript.messages) == ["u1", "u2"]
    first = transcript.messages["u1"]
    assert isinstance(first, UserMessage)
    assert first.message.content == "second"
    assert transcript.line_numbers["u1"] == 3


def test_r7_14_metadata_maps_last_one_wins_and_need_their_key() -> None:
    data = jsonl(
        user("u1", None),
        {"type": "custom-title", "sessionId": "s1", "customTitle": "old"},
        {"type": "custom-title", "sessionId": "s1", "customTitle": "new"},
        {"type": "custom-title", "customTitle": "no session"},
        {"type": "tag", "sessionId": "s1", "tag": "t"},
        {"type": "summary", "summary": "Did things", "leafUuid": "u1"},
        {"type": "pr-link", "sessionId": "s1", "prNumber": 7, "prUrl": "https://x/7", "prRepository": "o/r"},
        {"type": "content-replacement", "sessionId": "s1", "replacements": [{"a": 1}]},
        {"type": "content-replacement", "sessionId": "s1", "agentId": "ag", "replacements": [{"b": 2}]},
    )
    transcript = load(data)
    assert transcript.custom_titles == {"s1": "new"}
    assert transcript.summaries == {"u1": "Did things"}
    assert transcript.content_replacements == {"s1": ({"a": 1},)}
    assert transcript.agent_content_replacements == {"ag": ({"b": 2},)}
    meta = session_metadata(transcript, transcript.messages["u1"])
    assert (meta.custom_title, meta.tag, meta.summary) == ("new", "t", "Did things")
    assert meta.pr_link is not None
    assert meta.pr_link.pr_number == 7


def test_compact_boundary_discards_earlier_context_collapse_commits() -> None:
    data = jsonl(
        user("u1", None),
        {"type": "marble-origami-commit", "sessionId": "s1", "id": "c1"},
        system("b1", None, "compact_boundary", second=1),
        {"type": "marble-origami-commit", "sessionId": "s1", "id": "c2"},
    )
    commits = load(data).context_collapse_commits
    assert [commit.model_extra["id"] for commit in commits if commit.model_extra] == ["c2"]


# --- R7.16 ---------------------------------------------------------------------------------------


def test_r7_16_progress_lines_are_bridged_not_loaded() -> None:
    data = jsonl(
        user("u1", None, second=1),
        assistant("a1", "u1", [tool_use("t1")], second=2),
        progress("p1", "a1", second=3),
        progress("p2", "p1", second=4),
        user("r1", "p2", [tool_result("t1")], second=5),
    )
    transcript = load(data)
    assert list(transcript.messages) == ["u1", "a1", "r1"]
    assert transcript.messages["r1"].parent_uuid == "a1"
    assert transcript.bridged_progress_children == 1
    assert uuids(build_conversation_chain(transcript, "r1")) == ["u1", "a1", "r1"]


def test_r7_16_progress_root_bridges_to_null() -> None:
    transcript = load(jsonl(progress("p1", None), progress("p2", "p1"), user("u1", "p2")))
    assert transcript.messages["u1"].parent_uuid is None


def test_r7_16_only_later_children_are_bridged() -> None:
    """The bridge is built in file order: a message pointing at a progress line written after it keeps
    its (dangling) parent, as in Claude Code."""
    transcript = load(jsonl(user("u1", None), user("u2", "p9"), progress("p9", "u1")))
    assert transcript.messages["u2"].parent_uuid == "p9"


# --- R7.17.1 preserved segment -------------------------------------------------------------------


def _preserved_segment_file(*, extra_boundary: bool = False, head: str = "k1") -> str:
    segment = {"headUuid": head, "anchorUuid": "s", "tailUuid": "k2"}
    lines = [
        user("o1", None, "old", second=1),
        assistant("o2", "o1", [text("old answer")], second=2),
        user("k1", "o2", "kept prompt", second=3),
        assistant("k2", "k1", [text("kept answer")], second=4),
        system("b", None, "compact_boundary", second=5, compactMetadata={"preservedSegment": segment}),
        user("s", "b", "summary", second=6, isCompactSummary=True),
        user("n", "s", "next prompt", second=7),
    ]
    if extra_boundary:
        lines += [system("b2", None, "compact_boundary", second=8), user("s2", "b2", "summary 2", second=9)]
    return jsonl(*lines)


def test_r7_17_1_live_segment_is_relinked_and_old_history_pruned() -> None:
    transcript = load(_preserved_segment_file())
    assert transcript.relink == "relinked"
    assert list(transcript.messages) == ["k1", "k2", "b", "s", "n"]
    assert transcript.messages["k1"].parent_uuid == "s"
    assert transcript.messages["n"].parent_uuid == "k2"
    kept = transcript.messages["k2"]
    assert isinstance(kept, AssistantMessage)
    assert kept.message.usage == {
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 0,
    }
    assert uuids(build_conversation_chain(transcript, "n")) == ["b", "s", "k1", "k2", "n"]


def test_r7_17_1_stale_segment_only_prunes_before_the_last_boundary() -> None:
    transcript = load(_preserved_segment_file(extra_boundary=True))
    assert transcript.relink == "stale"
    assert list(transcript.messages) == ["b2", "s2"]


def test_r7_17_1_broken_tail_to_head_walk_aborts_everything() -> None:
    transcript = load(_preserved_segment_file(head="missing"))
    assert transcript.relink == "walk_broken"
    assert list(transcript.messages) == ["o1", "o2", "k1", "k2", "b", "s", "n"]
    assert transcript.messages["k1"].parent_uuid == "o2"
    kept = transcript.messages["k2"]
    assert isinstance(kept, AssistantMessage)
    assert kept.message.usage is not None
    assert kept.message.usage["input_tokens"] == 100


def test_r7_17_1_boundary_without_segment_changes_nothing() -> None:
    data = jsonl(user("o1", None), system("b", None, "compact_boundary", second=1), user("s", "b", second=2))
    transcript = load(data)
    assert transcript.relink == "none"
    assert list(transcript.messages) == ["o1", "b", "s"]
    assert uuids(build_conversation_chain(transcript, "s")) == ["b", "s"]


# --- R7.17.2 snip --------------------------------------------------------------------------------


def test_r7_17_2_snip_removals_relink_across_the_gap() -> None:
    data = jsonl(
        user("m1", None, second=1),
        assistant("m2", "m1", [text("x")], second=2),
        user("m3", "m2", second=3),
        assistant("m4", "m3", [text("y")], second=4),
        system("snip", "m4", "informational", second=5, snipMetadata={"removedUuids": ["m2", "m3"]}),
    )
    transcript = load(data)
    assert list(transcript.messages) == ["m1", "m4", "snip"]
    assert transcript.messages["m4"].parent_uuid == "m1"


# --- R7.17.3 leaves ------------------------------------------------------------------------------


def test_r7_17_3_leaf_is_nearest_user_or_assistant_above_a_terminal() -> None:
    data = jsonl(
        user("u1", None, second=1),
        assistant("a1", "u1", [text("x")], second=2),
        system("sys", "a1", "turn_duration", second=3),
        user("fork", "u1", "edited prompt", second=4),
    )
    transcript = load(data)
    assert transcript.leaf_uuids == ("a1", "fork")
    assert not transcript.has_cycle


def test_r7_17_3_pebble_leaf_prune_gate_skips_mid_conversation_ancestors() -> None:
    data = jsonl(
        user("u1", None, second=1),
        assistant("a1", "u1", [tool_use("t1")], second=2),
        system("hook", "a1", "stop_hook_summary", second=3),
        user("r1", "a1", [tool_result("t1")], second=4),
    )
    parse = read_transcript(data)
    assert build_transcript(parse).leaf_uuids == ("a1", "r1")
    assert build_transcript(parse, prune_leaves=True).leaf_uuids == ("r1",)


def test_r7_17_3_cycles_are_detected_and_stop_walks() -> None:
    data = jsonl(
        system("x", "y", "informational"),
        system("y", "x", "informational"),
        system("t", "x", "informational"),
        user("u", None),
    )
    transcript = load(data)
    assert transcript.has_cycle
    assert transcript.leaf_uuids == ("u",)


def test_r7_18_chain_walk_stops_on_a_cycle() -> None:
    transcript = load(jsonl(user("a", "b", second=1), user("b", "a", second=2)))
    assert uuids(build_conversation_chain(transcript, "a")) == ["b", "a"]


# --- R7.18 ---------------------------------------------------------------------------------------


def test_r7_18_example_parallel_results_streamed_before_results() -> None:
    """R7.8 second case written as [U0, A1(t1), A2(t2), TR1, TR2, A3]: chain [U0, A1, A2, TR2, A3]
    becomes [U0, A1, A2, TR1, TR2, A3]."""
    data = jsonl(
        user("U0", None, "go", second=1),
        assistant("A1", "U0", [tool_use("t1")], msg_id="msg_X", second=2),
        assistant("A2", "A1", [tool_use("t2")], msg_id="msg_X", second=3),
        user("TR1", "A1", [tool_result("t1")], second=4, sourceToolAssistantUUID="A1"),
        user("TR2", "A2", [tool_result("t2")], second=5, sourceToolAssistantUUID="A2"),
        assistant("A3", "TR2", [text("done")], msg_id="msg_Y", second=6),
    )
    transcript = load(data)
    assert uuids(build_conversation_chain(transcript, "A3")) == ["U0", "A1", "A2", "TR1", "TR2", "A3"]


def test_r7_18_off_chain_sibling_and_its_result_are_recovered_after_last_member() -> None:
    """Loss mode 1: the walk goes A1 → TR1 → next and drops A2 (same message.id) and TR2."""
    data = jsonl(
        user("U0", None, "go", second=1),
        assistant("A1", "U0", [tool_use("t1")], msg_id="msg_X", second=2),
        assistant("A2", "A1", [tool_use("t2")], msg_id="msg_X", second=3),
        user("TR2", "A2", [tool_result("t2")], second=4),
        user("TR1", "A1", [tool_result("t1")], second=5),
        assistant("A3", "TR1", [text("done")], msg_id="msg_Y", second=6),
    )
    transcript = load(data)
    assert uuids(build_conversation_chain(transcript, "A3")) == ["U0", "A1", "A2", "TR2", "TR1", "A3"]


def test_r7_18_unknown_leaf_raises() -> None:
    with pytest.raises(BrokenTranscriptChain) as caught:
        build_conversation_chain(load(jsonl(user("u1", None))), "nope")
    assert caught.value.uuid == "nope"


def test_r7_18_tool_heavy_keeps_both_parallel_calls_and_results(corpus_root: Path) -> None:
    """marot tool_heavy.jsonl lines 29/30 are two tool_use lines of one reply; their results (lines 32,
    33) hang off their own lines, so the plain walk misses line 30 and line 32."""
    transcript = corpus(corpus_root, "marot__spotter/tool_heavy.jsonl")
    leaf = select_leaf(transcript)
    assert leaf is not None
    assert transcript.line_numbers[leaf.uuid] == 39
    chain = build_conversation_chain(transcript, leaf.uuid)
    lines = [transcript.line_numbers[message.uuid] for message in chain]
    assert lines == [4, 5, 11, 12, 13, 17, 18, 20, 21, 22, 23, 24, 26, 27, 28, 29, 30, 32, 33, 34, 36, 37, 38, 39]
    calls = {b.id for m in chain if isinstance(m, AssistantMessage) for b in m.blocks if isinstance(b, ToolUseBlock)}
    results = {
        b.tool_use_id for m in chain if isinstance(m, UserMessage) for b in m.blocks if isinstance(b, ToolResultBlock)
    }
    assert {"toolu_01DKTWcKpZ2ksZQmoKKfxiw6", "toolu_01JJds55jYrYwd9TktNGndRY"} <= calls
    assert calls == results


# --- compact boundaries --------------------------------------------------------------------------


def test_compacted_session_chain_starts_at_the_boundary(big_parse: TranscriptParse) -> None:
    transcript = build_transcript(big_parse)
    assert transcript.bridged_progress_children > 0
    chain = main_chain(transcript)
    assert isinstance(chain[0], CompactBoundarySystemMessage)
    assert chain[0].parent_uuid is None
    assert chain[0].logical_parent_uuid == "7c642069-996d-4ae0-a61c-554b35d36fb6"
    assert transcript.line_numbers[chain[0].uuid] == 1256
    assert isinstance(chain[1], UserMessage)
    assert chain[1].is_compact_summary is True
    assert all(message.uuid in transcript.messages for message in chain)
    assert len({message.uuid for message in chain}) == len(chain)


def test_commugraph_compacted_session_chain_starts_at_the_boundary(corpus_root: Path) -> None:
    transcript = corpus(corpus_root, "CH-chuan__CommuGraph/ab51623b-c26d-45f5-b98e-f9d0cfa17018.jsonl")
    chain = main_chain(transcript)
    assert isinstance(chain[0], CompactBoundarySystemMessage)
    assert transcript.line_numbers[chain[0].uuid] == 339
    assert isinstance(chain[1], UserMessage)
    assert chain[1].is_compact_summary is True


# --- R7.19 leaf selection and sidechains ---------------------------------------------------------


def test_r7_19_resume_file_ignores_later_sidechain_leaves() -> None:
    data = jsonl(
        user("u1", None, "main", second=1),
        assistant("a1", "u1", [text("main answer")], second=2),
        user("side1", None, "sub task", second=3, isSidechain=True),
        assistant("side2", "side1", [text("sub answer")], second=4, isSidechain=True),
        system("late", "a1", "turn_duration", second=5),
    )
    transcript = load(data)
    jsonl_leaf = select_leaf(transcript, "jsonl_path")
    picker_leaf = select_leaf(transcript, "picker")
    session_leaf = select_leaf(transcript, "session_id")
    assert (jsonl_leaf and jsonl_leaf.uuid, picker_leaf and picker_leaf.uuid) == ("a1", "side2")
    assert session_leaf is not None
    assert session_leaf.uuid == "late"
    assert uuids(build_conversation_chain(transcript, "late")) == ["u1", "a1", "late"]


def test_r7_19_unparsable_timestamps_never_win() -> None:
    data = jsonl(user("u1", None, second=1), {**user("u2", None), "timestamp": "[trimmed for fixture]"})
    leaf = select_leaf(load(data))
    assert leaf is not None
    assert leaf.uuid == "u1"
    assert timestamp_ms("2026-01-01T00:00:01.000Z") == 1767225601000.0
    assert timestamp_ms("nope") is None


def test_r7_19_inline_sidechain_layout_main_chain_has_no_sidechain_lines(corpus_root: Path) -> None:
    """d-kimuson 5c0375b4 (v1.0.108) keeps the Task sub-agent's lines inline (isSidechain: true)."""
    transcript = corpus(corpus_root, "d-kimuson__claude-code-viewer/5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl")
    sidechain_leaves = [uuid for uuid in transcript.leaf_uuids if transcript.messages[uuid].is_sidechain]
    assert len(sidechain_leaves) == 2
    chain = main_chain(transcript)
    assert chain
    assert not any(message.is_sidechain for message in chain)
    assert transcript.line_numbers[chain[-1].uuid] == 53
    inline_agent = subagent_chain(transcript)
    assert inline_agent
    assert all(message.is_sidechain for message in inline_agent)


@pytest.mark.parametrize(
    ("relative", "agent_id", "length"),
    [
        ("CH-chuan__CommuGraph/agent-6f2b8f7b.jsonl", "6f2b8f7b", 64),
        ("CH-chuan__CommuGraph/agent-773d7508.jsonl", "773d7508", 58),
        ("marot__spotter/258c7280-ae70-4798-800f-63464d01a85d/subagents/agent-a881341.jsonl", "a881341", 8),
        (
            "jazzyalex__agent-sessions/subagent/0a1b2c3d-4e5f-4061-8071-2a3b4c5d6e7f/subagents/"
            "agent-a0ad4f44468bdf20d.jsonl",
            "a0ad4f44468bdf20d",
            4,
        ),
    ],
)
def test_subagent_files_load_as_one_sidechain_chain(
    corpus_root: Path, relative: str, agent_id: str, length: int
) -> None:
    transcript = corpus(corpus_root, relative)
    assert select_leaf(transcript) is None  # every line is a sidechain
    chain = subagent_chain(transcript, agent_id)
    assert len(chain) == length
    assert chain[0].parent_uuid is None
    assert all(message.is_sidechain and message.agent_id == agent_id for message in chain)
    assert subagent_chain(transcript, "someone-else") == []


def test_r7_19_remove_chain_fields_keeps_the_rest_of_the_envelope() -> None:
    transcript = load(jsonl(user("u1", None), user("u2", "u1", second=1)))
    stripped = remove_chain_fields(build_conversation_chain(transcript, "u2"))
    wire = stripped[1].to_wire()
    assert "parentUuid" not in wire
    assert "isSidechain" not in wire
    assert (wire["sessionId"], wire["cwd"], wire["uuid"]) == ("s1", "/home/alice/proj", "u2")
