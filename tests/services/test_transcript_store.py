"""TranscriptStore: incremental recording (R7.7), parents (R7.8), routing (R7.9), cleaning (R7.5),
line format (R7.3), lazy creation (R7.2), compact-boundary write order (R7.11), tombstones (R7.13)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from agentbus_redis.clock import FixedClock
from agentbus_redis.ids import SequentialIds
from agentbus_redis.messages.content import ContentBlock, TextBlock, ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.factories import (
    annotate_boundary_with_preserved_segment,
    create_attachment_message,
    create_compact_boundary_message,
    create_informational_message,
    create_progress_message,
    create_user_message,
)
from agentbus_redis.messages.kinds import AssistantMessage, AssistantPayload, AttachmentMessage, Message, UserMessage
from agentbus_redis.session_ids import claude_session_id
from agentbus_redis.transcript_files.cleaning import CleaningPolicy
from agentbus_redis.transcript_files.layout import legacy_session_file
from agentbus_redis.transcript_files.lines import SessionStamp
from agentbus_redis.transcript_files.store import StoreConfig, TranscriptStore

CWD = "/home/alice/proj"
SESSION = "s1"
STAMP = SessionStamp(user_type="external", entrypoint="cli", version="2.1.88", git_branch=None)

clock = FixedClock()
ids = SequentialIds()


def user(uuid: str, text: str = "hi", **fields: Any) -> UserMessage:
    return create_user_message(text, uuid=uuid, clock=clock, **fields)


def assistant(
    uuid: str, blocks: Sequence[ContentBlock] | None = None, *, message_id: str | None = None
) -> AssistantMessage:
    payload = AssistantPayload(
        id=message_id or f"msg_{uuid}",
        model="claude-sonnet-4-5",
        content=list(blocks) if blocks is not None else [TextBlock(text=f"reply {uuid}")],
        stop_reason="end_turn",
    )
    return AssistantMessage(message=payload, uuid=uuid, timestamp=clock())


def tool_use(tool_id: str, name: str = "Bash") -> ToolUseBlock:
    return ToolUseBlock(id=tool_id, name=name, input={"command": "ls"})


def tool_result(uuid: str, tool_id: str, source: str) -> UserMessage:
    return create_user_message(
        [ToolResultBlock(tool_use_id=tool_id, content="ok", is_error=False)],
        uuid=uuid,
        clock=clock,
        tool_use_result={"stdout": "ok"},
        source_tool_assistant_uuid=source,
    )


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def parents(path: Path) -> dict[str, str | None]:
    return {line["uuid"]: line["parentUuid"] for line in lines_of(path) if "uuid" in line}


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[TranscriptStore]:
    transcript_store = TranscriptStore(tmp_path, StoreConfig(stamp=STAMP))
    yield transcript_store
    await transcript_store.close()


async def record(store: TranscriptStore, messages: Sequence[Message], **kwargs: Any) -> Path:
    result = await store.record(SESSION, messages, cwd=CWD, **kwargs)
    return result.path


# ---------------------------------------------------------------- R7.7 incremental recording
async def test_r7_7_redelivered_message_is_a_no_op(store: TranscriptStore) -> None:
    messages: list[Message] = [user("U0"), assistant("A1")]
    first = await store.record(SESSION, messages, cwd=CWD)
    again = await store.record(SESSION, messages, cwd=CWD)
    assert first.written == ("U0", "A1")
    assert again.written == ()
    assert again.skipped == ("U0", "A1")
    assert again.last_uuid == "A1"  # the recorded prefix is the starting parent (step 5)
    assert len(lines_of(first.path)) == 2


async def test_r7_7_uuid_set_is_loaded_from_the_file_after_a_restart(tmp_path: Path) -> None:
    first_store = TranscriptStore(tmp_path, StoreConfig(stamp=STAMP))
    path = (await first_store.record(SESSION, [user("U0"), assistant("A1")], cwd=CWD)).path
    await first_store.close()
    second_store = TranscriptStore(tmp_path, StoreConfig(stamp=STAMP))
    result = await second_store.record(SESSION, [user("U0"), assistant("A1"), user("U2")], cwd=CWD)
    await second_store.close()
    assert result.written == ("U2",)
    assert parents(path) == {"U0": None, "A1": "U0", "U2": "A1"}


async def test_r7_7_recorded_prefix_sets_the_starting_parent(store: TranscriptStore) -> None:
    path = await record(store, [user("U0"), assistant("A1")])
    await record(store, [user("U0"), assistant("A1"), user("U2"), assistant("A3")])
    assert parents(path) == {"U0": None, "A1": "U0", "U2": "A1", "A3": "U2"}


async def test_r7_7_recorded_message_after_a_new_one_does_not_move_the_parent(store: TranscriptStore) -> None:
    path = await record(store, [user("OLD")])
    # After compaction the new boundary comes first, so re-kept old messages are not a prefix.
    await record(store, [user("NEW1"), user("OLD"), user("NEW2")])
    assert parents(path) == {"OLD": None, "NEW1": None, "NEW2": "NEW1"}


async def test_r7_7_parent_hint_starts_the_chain(store: TranscriptStore) -> None:
    path = await record(store, [user("U0")])
    await record(store, [assistant("A1")], parent_hint="U0")
    assert parents(path)["A1"] == "U0"


async def test_continue_chain_uses_the_last_recorded_chain_participant(store: TranscriptStore) -> None:
    path = await record(store, [user("U0"), assistant("A1")])
    result = await store.record(SESSION, [user("U2")], cwd=CWD, continue_chain=True)
    assert parents(path)["U2"] == "A1"
    assert result.last_uuid == "U2"


async def test_r7_7_last_uuid_without_new_messages_falls_back_to_hint(store: TranscriptStore) -> None:
    result = await store.record(SESSION, [], cwd=CWD, parent_hint="X")
    assert result.last_uuid == "X"
    assert result.written == ()


# ---------------------------------------------------------------- R7.8 parents
async def test_r7_8_tool_results_are_parented_to_their_assistant_streaming_order(store: TranscriptStore) -> None:
    """R7.8 example 1: [U0, A1(t1), TR1, A2(t2), TR2, A3]."""
    batch: list[Message] = [
        user("U0"),
        assistant("A1", [tool_use("t1")], message_id="m1"),
        tool_result("TR1", "t1", "A1"),
        assistant("A2", [tool_use("t2")], message_id="m1"),
        tool_result("TR2", "t2", "A2"),
        assistant("A3"),
    ]
    path = await record(store, batch, parent_hint="prev")
    assert parents(path) == {"U0": "prev", "A1": "U0", "TR1": "A1", "A2": "TR1", "TR2": "A2", "A3": "TR2"}


async def test_r7_8_tool_results_after_both_tool_uses(store: TranscriptStore) -> None:
    """R7.8 example 2: [U0, A1(t1), A2(t2), TR1, TR2, A3] — TR1 hangs off the main path."""
    batch: list[Message] = [
        user("U0"),
        assistant("A1", [tool_use("t1")], message_id="m1"),
        assistant("A2", [tool_use("t2")], message_id="m1"),
        tool_result("TR1", "t1", "A1"),
        tool_result("TR2", "t2", "A2"),
        assistant("A3"),
    ]
    path = await record(store, batch)
    assert parents(path) == {"U0": None, "A1": "U0", "A2": "A1", "TR1": "A1", "TR2": "A2", "A3": "TR2"}
    line = next(line for line in lines_of(path) if line["uuid"] == "TR1")
    assert line["sourceToolAssistantUUID"] == "A1"


async def test_r7_8_compact_boundary_has_null_parent_and_logical_parent(store: TranscriptStore) -> None:
    boundary = create_compact_boundary_message("auto", 1000, clock=clock, ids=ids)
    summary = user("S", "This session is being continued…", is_compact_summary=True)
    path = await record(store, [user("U0"), boundary, summary])
    by_uuid = {line["uuid"]: line for line in lines_of(path)}
    assert by_uuid[boundary.uuid]["parentUuid"] is None
    assert by_uuid[boundary.uuid]["logicalParentUuid"] == "U0"
    assert by_uuid["S"]["parentUuid"] == boundary.uuid
    assert "logicalParentUuid" not in by_uuid["U0"]


async def test_r7_8_boundary_own_logical_parent_wins(store: TranscriptStore) -> None:
    boundary = create_compact_boundary_message("manual", 5, last_pre_compact_uuid="LAST", clock=clock, ids=ids)
    path = await record(store, [user("U0"), boundary])
    line = next(line for line in lines_of(path) if line["uuid"] == boundary.uuid)
    assert line["parentUuid"] is None
    assert line["logicalParentUuid"] == "LAST"


async def test_r7_6_attachments_and_system_messages_join_the_chain(tmp_path: Path) -> None:
    policy = CleaningPolicy(user_type="ant")
    transcript_store = TranscriptStore(tmp_path, StoreConfig(stamp=STAMP, cleaning=policy))
    attachment = create_attachment_message({"type": "todo_reminder", "content": []}, clock=clock, ids=ids)
    info = create_informational_message("note", clock=clock, ids=ids)
    result = await transcript_store.record(SESSION, [user("U0"), attachment, info, assistant("A1")], cwd=CWD)
    await transcript_store.close()
    assert parents(result.path) == {"U0": None, attachment.uuid: "U0", info.uuid: attachment.uuid, "A1": info.uuid}


# ---------------------------------------------------------------- R7.5 cleaning
async def test_r7_5_progress_is_never_persisted_and_never_moves_the_parent(store: TranscriptStore) -> None:
    progress = create_progress_message(
        tool_use_id="t1", parent_tool_use_id="t1", data={"type": "x"}, clock=clock, ids=ids
    )
    path = await record(store, [user("U0"), progress, assistant("A1")])
    assert parents(path) == {"U0": None, "A1": "U0"}


async def test_r7_5_external_users_persist_no_attachment_except_enabled_hook_context(tmp_path: Path) -> None:
    hook = create_attachment_message({"type": "hook_additional_context", "content": ["x"]}, clock=clock, ids=ids)
    other = create_attachment_message({"type": "todo_reminder"}, clock=clock, ids=ids)
    default_store = TranscriptStore(tmp_path / "a", StoreConfig(stamp=STAMP))
    path = (await default_store.record(SESSION, [user("U0"), hook, other], cwd=CWD)).path
    await default_store.close()
    assert [line["uuid"] for line in lines_of(path)] == ["U0"]

    policy = CleaningPolicy(save_hook_additional_context=True)
    hook_store = TranscriptStore(tmp_path / "b", StoreConfig(stamp=STAMP, cleaning=policy))
    path = (await hook_store.record(SESSION, [user("U0"), hook, other], cwd=CWD)).path
    await hook_store.close()
    assert [line["uuid"] for line in lines_of(path)] == ["U0", hook.uuid]


async def test_r7_5_repl_tool_blocks_are_stripped_for_external_users(store: TranscriptStore) -> None:
    mixed = assistant("A1", [TextBlock(text="go"), tool_use("r1", "REPL"), tool_use("b1", "Bash")])
    repl_only = assistant("A2", [tool_use("r2", "REPL")])
    results = create_user_message(
        [ToolResultBlock(tool_use_id="r1", content="x"), ToolResultBlock(tool_use_id="b1", content="y")],
        uuid="TR",
        clock=clock,
    )
    repl_result = create_user_message([ToolResultBlock(tool_use_id="r2", content="z")], uuid="TR2", clock=clock)
    path = await record(store, [user("U0"), mixed, repl_only, results, repl_result])
    by_uuid = {line["uuid"]: line for line in lines_of(path)}
    assert set(by_uuid) == {"U0", "A1", "TR"}  # emptied messages are dropped
    assert [block["type"] for block in by_uuid["A1"]["message"]["content"]] == ["text", "tool_use"]
    assert [block["tool_use_id"] for block in by_uuid["TR"]["message"]["content"]] == ["b1"]


async def test_r7_5_virtual_messages_are_written_without_the_flag(store: TranscriptStore) -> None:
    virtual = user("V", "virtual", is_virtual=True)
    path = await record(store, [virtual])
    (line,) = lines_of(path)
    assert "isVirtual" not in line


# ---------------------------------------------------------------- R7.3 line format
async def test_r7_3_key_order_and_session_stamp(store: TranscriptStore) -> None:
    path = (await store.record(SESSION, [user("U0", "fix the bug")], cwd=CWD, prompt_id="p1")).path
    raw = path.read_text().splitlines()[0]
    assert " " not in raw.replace("fix the bug", "")  # compact JSON
    line = json.loads(raw)
    assert list(line) == [
        "parentUuid", "isSidechain", "promptId", "type", "message", "uuid", "timestamp",
        "userType", "entrypoint", "cwd", "sessionId", "version",
    ]  # fmt: skip
    assert line["userType"] == "external"
    assert line["entrypoint"] == "cli"
    assert line["version"] == "2.1.88"
    assert line["cwd"] == CWD
    assert line["sessionId"] == claude_session_id(SESSION)  # the file's name: a UUID Claude Code resumes


async def test_r7_3_stamp_wins_over_fields_copied_from_another_session(store: TranscriptStore) -> None:
    copied = user("U0").model_copy(
        update={
            "session_id": "other",
            "cwd": "/elsewhere",
            "git_branch": "old",
            "parent_uuid": "zzz",
            "is_sidechain": True,
        }
    )
    path = await record(store, [copied])
    (line,) = lines_of(path)
    assert line["sessionId"] == claude_session_id(SESSION)
    assert line["cwd"] == CWD
    assert "gitBranch" not in line  # undefined in the stamp removes the copied key too
    assert line["parentUuid"] is None  # reassigned (R7.8), never taken from the message
    assert line["isSidechain"] is False


async def test_r7_3_prompt_id_only_on_user_lines_and_git_branch_looked_up(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/feature/x\n")
    transcript_store = TranscriptStore(tmp_path / "data", StoreConfig(stamp=SessionStamp(version="1")))
    result = await transcript_store.record(
        SESSION, [user("U0"), assistant("A1")], cwd=str(repo / "sub"), prompt_id="p9"
    )
    await transcript_store.close()
    first, second = lines_of(result.path)
    assert first["promptId"] == "p9"
    assert "promptId" not in second
    assert first["gitBranch"] == second["gitBranch"] == "feature/x"


# ---------------------------------------------------------------- R7.2 lazy creation
async def test_r7_2_nothing_is_written_before_a_user_or_assistant_message(tmp_path: Path) -> None:
    policy = CleaningPolicy(user_type="ant")
    transcript_store = TranscriptStore(tmp_path, StoreConfig(stamp=STAMP, cleaning=policy))
    info = create_informational_message("starting", clock=clock, ids=ids)
    early = await transcript_store.record(SESSION, [info], cwd=CWD)
    assert not early.durable
    assert not early.path.exists()
    assert not await transcript_store.append_metadata(SESSION, {"type": "custom-title", "customTitle": "t"}, cwd=CWD)
    late = await transcript_store.record(SESSION, [user("U0")], cwd=CWD, parent_hint=early.last_uuid)
    assert late.durable
    await transcript_store.close()
    written = lines_of(late.path)
    assert [line["type"] for line in written] == ["system", "custom-title", "user"]
    assert written[2]["parentUuid"] == info.uuid


async def test_r7_2_unmaterialized_buffer_is_dropped_at_close(tmp_path: Path) -> None:
    transcript_store = TranscriptStore(tmp_path, StoreConfig(stamp=STAMP, cleaning=CleaningPolicy(user_type="ant")))
    result = await transcript_store.record(SESSION, [create_informational_message("x", clock=clock, ids=ids)], cwd=CWD)
    await transcript_store.close()
    assert not result.path.exists()


# ---------------------------------------------------------------- R7.9 sidechains
async def test_r7_9_sidechain_lines_go_to_the_agent_file_without_dedup(store: TranscriptStore) -> None:
    main = await record(store, [user("U0")])
    batch: list[Message] = [user("SA0", "task"), assistant("SA1")]
    first = await store.record_sidechain(SESSION, "a42", batch, cwd=CWD)
    second = await store.record_sidechain(SESSION, "a42", batch, cwd=CWD)
    assert first.path == main.parent / claude_session_id(SESSION) / "subagents" / "agent-a42.jsonl"
    assert second.written == ("SA0", "SA1")  # no de-dup for sidechains
    lines = lines_of(first.path)
    assert len(lines) == 4
    assert all(line["isSidechain"] is True and line["agentId"] == "a42" for line in lines)
    assert lines[0]["parentUuid"] is None
    assert lines[1]["parentUuid"] == "SA0"
    # sidechain uuids never join the main set: the main session can still record them.
    assert (await store.record(SESSION, [user("SA0")], cwd=CWD)).written == ("SA0",)


async def test_r7_1_subagent_meta_sidecar_beside_the_agent_file(store: TranscriptStore) -> None:
    result = await store.record_sidechain(SESSION, "a7", [user("SA0")], cwd=CWD, subdir="workflows")
    meta = await store.write_subagent_meta(SESSION, "a7", {"agentType": "Explore"}, cwd=CWD, subdir="workflows")
    assert meta == result.path.with_name("agent-a7.meta.json")
    assert json.loads(meta.read_text()) == {"agentType": "Explore"}


# ---------------------------------------------------------------- R7.11 compact-boundary write order
def _compaction(anchor_is_summary: bool = True) -> tuple[list[Message], list[Message], str]:
    """Pre-compact history [U0, A1, U2, A3] keeping [U2, A3]; post-compact [B, S, U2, A3]."""
    history: list[Message] = [user("U0"), assistant("A1"), user("U2"), assistant("A3")]
    boundary = create_compact_boundary_message("auto", 100, last_pre_compact_uuid="A3", clock=clock, ids=ids)
    summary = user("S", "summary", is_compact_summary=True)
    boundary = annotate_boundary_with_preserved_segment(
        boundary, "S" if anchor_is_summary else boundary.uuid, history[2:]
    )
    return history, [boundary, summary, *history[2:]], boundary.uuid


async def test_r7_11_preserved_segment_from_history_is_written_before_the_boundary(store: TranscriptStore) -> None:
    history, post, boundary_uuid = _compaction()
    path = await record(store, history[:2])  # A3/U2 never recorded (fire-and-forget lost or pending)
    await record(store, post[:1], history=history)
    order = [line["uuid"] for line in lines_of(path)]
    assert order == ["U0", "A1", "U2", "A3", boundary_uuid]
    assert parents(path)["U2"] == "A1"


async def test_r7_11_preserved_segment_in_the_batch_is_written_first(store: TranscriptStore) -> None:
    history, post, boundary_uuid = _compaction()
    path = await record(store, history[:2])
    result = await store.record(SESSION, post, cwd=CWD, continue_chain=True)
    assert result.written == ("U2", "A3", boundary_uuid, "S")
    order = [line["uuid"] for line in lines_of(path)]
    assert order == ["U0", "A1", "U2", "A3", boundary_uuid, "S"]
    assert parents(path) == {"U0": None, "A1": "U0", "U2": "A1", "A3": "U2", boundary_uuid: None, "S": boundary_uuid}


# ---------------------------------------------------------------- R7.13 tombstones
async def test_r7_13_remove_cuts_the_line_in_the_tail_window(store: TranscriptStore) -> None:
    path = await record(store, [user("U0"), assistant("A1"), user("U2")])
    result = await store.remove(SESSION, "A1", cwd=CWD)
    assert result.outcome == "tail"
    assert [line["uuid"] for line in lines_of(path)] == ["U0", "U2"]
    # parentUuid references are never mistaken for the target line.
    assert parents(path)["U2"] == "A1"


async def test_r7_13_remove_falls_back_to_a_full_rewrite(tmp_path: Path) -> None:
    config = StoreConfig(stamp=STAMP, tail_window_bytes=512)
    transcript_store = TranscriptStore(tmp_path, config)
    path = (
        await transcript_store.record(SESSION, [user("U0"), *(user(f"U{n}", "x" * 300) for n in range(1, 6))], cwd=CWD)
    ).path
    result = await transcript_store.remove(SESSION, "U1", cwd=CWD)
    await transcript_store.close()
    assert result.outcome == "rewrite"
    assert [line["uuid"] for line in lines_of(path)] == ["U0", "U2", "U3", "U4", "U5"]


async def test_r7_13_remove_gives_up_above_the_rewrite_limit(tmp_path: Path) -> None:
    config = StoreConfig(stamp=STAMP, tail_window_bytes=256, max_rewrite_bytes=1024)
    transcript_store = TranscriptStore(tmp_path, config)
    path = (
        await transcript_store.record(SESSION, [user("U0"), *(user(f"U{n}", "x" * 400) for n in range(1, 5))], cwd=CWD)
    ).path
    result = await transcript_store.remove(SESSION, "U0", cwd=CWD)
    await transcript_store.close()
    assert result.outcome == "too_large"
    assert len(lines_of(path)) == 5


async def test_r7_13_remove_of_a_missing_uuid_is_not_found(store: TranscriptStore) -> None:
    await record(store, [user("U0")])
    assert (await store.remove(SESSION, "nope", cwd=CWD)).outcome == "not_found"
    assert (await store.remove("other-session", "nope", cwd=CWD)).outcome == "no_file"


async def test_r7_13_obs_fix_a_just_recorded_target_is_never_missed(store: TranscriptStore) -> None:
    """[OBS]: Claude Code's removal misses a line still in its 100 ms write queue. Here a record is in the
    file before ``record`` even awaits, so a remove issued right behind it always finds it."""
    record_task = asyncio.create_task(store.record(SESSION, [user("U0"), assistant("A1")], cwd=CWD))
    await asyncio.sleep(0)
    remove_task = asyncio.create_task(store.remove(SESSION, "A1", cwd=CWD))
    result = (await asyncio.gather(record_task, remove_task))[1]
    assert result.removed
    assert [line["uuid"] for line in lines_of(store.session_path(SESSION, CWD))] == ["U0"]


async def test_r7_13_remove_drops_the_target_from_the_unmaterialized_buffer(tmp_path: Path) -> None:
    transcript_store = TranscriptStore(tmp_path, StoreConfig(stamp=STAMP, cleaning=CleaningPolicy(user_type="ant")))
    info = create_informational_message("x", clock=clock, ids=ids)
    await transcript_store.record(SESSION, [info], cwd=CWD)
    assert (await transcript_store.remove(SESSION, info.uuid, cwd=CWD)).outcome == "buffered"
    path = (await transcript_store.record(SESSION, [user("U0")], cwd=CWD)).path
    await transcript_store.close()
    assert [line["uuid"] for line in lines_of(path)] == ["U0"]


async def test_r7_13_remove_from_a_sidechain_file(store: TranscriptStore) -> None:
    result = await store.record_sidechain(SESSION, "a1", [user("SA0"), assistant("SA1")], cwd=CWD)
    removal = await store.remove(SESSION, "SA0", cwd=CWD, agent_id="a1")
    assert removal.outcome == "tail"
    assert [line["uuid"] for line in lines_of(result.path)] == ["SA1"]


@pytest.mark.parametrize("order", [["A1", "A2"], ["A2", "A1"]])
async def test_r6_3_tombstoning_the_chain_end_rewinds_the_chain_to_a_line_in_the_file(
    store: TranscriptStore, order: list[str]
) -> None:
    """A half-streamed reply (two lines) tombstoned after a crashed model call, then the whole reply: its first
    line hangs off the prompt, as in the log, not off a removed line (a chain break ``transcript verify``
    reports). The tombstones may come in either order."""
    await store.record(SESSION, [user("U0"), assistant("A1"), assistant("A2")], cwd=CWD, continue_chain=True)
    for uuid in order:
        assert (await store.remove(SESSION, uuid, cwd=CWD)).removed
    path = (await store.record(SESSION, [assistant("B1"), user("U3")], cwd=CWD, continue_chain=True)).path
    assert parents(path) == {"U0": None, "B1": "U0", "U3": "B1"}


async def test_r6_3_a_rewind_past_lines_of_an_earlier_process_reads_the_file(tmp_path: Path) -> None:
    """The removed chain end was written before this store loaded the session: the file says where the chain
    ends now."""
    first = TranscriptStore(tmp_path, StoreConfig(stamp=STAMP))
    await first.record(SESSION, [user("U0"), assistant("A1"), assistant("A2")], cwd=CWD, continue_chain=True)
    await first.close()
    second = TranscriptStore(tmp_path, StoreConfig(stamp=STAMP))
    try:
        await second.remove(SESSION, "A1", cwd=CWD)
        await second.remove(SESSION, "A2", cwd=CWD)
        path = (await second.record(SESSION, [assistant("B1")], cwd=CWD, continue_chain=True)).path
    finally:
        await second.close()
    assert parents(path) == {"U0": None, "B1": "U0"}


async def test_records_and_removals_interleave_safely(store: TranscriptStore) -> None:
    """Concurrent records of one session share fsyncs and keep every line whole."""
    batches = [[user(f"C{n}-{i}") for i in range(3)] for n in range(20)]
    await asyncio.gather(*(store.record(SESSION, batch, cwd=CWD, continue_chain=True) for batch in batches))
    await store.remove(SESSION, "C5-1", cwd=CWD)
    uuids = [line["uuid"] for line in lines_of(store.session_path(SESSION, CWD))]
    assert len(uuids) == 59
    assert "C5-1" not in uuids


@pytest.mark.parametrize(
    ("name", "damage"),
    [
        ("invalid UTF-8 byte", lambda line: line.replace(b'"reply A1"', b'"reply A1 caf\xe9"')),
        ("lone surrogate escape", lambda line: line.replace(b'"reply A1"', b'"reply A1 \\ud83d"')),
    ],
)
async def test_issue15_r7_7_a_line_the_fast_parser_refuses_still_counts_for_de_dup_and_the_chain_tail(
    tmp_path: Path, name: str, damage: Any
) -> None:
    """orjson refuses both; the reader reads them (U+FFFD / the surrogate kept), so must the store."""
    first_store = TranscriptStore(tmp_path, StoreConfig(stamp=STAMP))
    path = (await first_store.record(SESSION, [user("U0"), assistant("A1")], cwd=CWD)).path
    await first_store.close()
    head, last, _ = path.read_bytes().split(b"\n")
    damaged = damage(last)
    assert damaged != last, name
    path.write_bytes(head + b"\n" + damaged + b"\n")
    second_store = TranscriptStore(tmp_path, StoreConfig(stamp=STAMP))
    result = await second_store.record(SESSION, [assistant("A1"), user("U2")], cwd=CWD)
    await second_store.close()
    assert result.written == ("U2",), name  # A1 is not written twice
    assert json.loads(path.read_bytes().split(b"\n")[2])["parentUuid"] == "A1", name  # the chain goes on


async def test_issue26_a_session_written_before_uuid_names_keeps_its_file(store: TranscriptStore) -> None:
    """A session agentbus wrote as ``<bus id>.jsonl`` (before issue 26) keeps growing in that file, its lines
    stamped with the name they are filed under; a new session gets its UUID name."""
    legacy = legacy_session_file(store.root, CWD, SESSION)
    legacy.parent.mkdir(parents=True)
    legacy.write_text(json.dumps({**user("U0").to_wire(), "sessionId": SESSION, "parentUuid": None}) + "\n")
    path = await record(store, [user("U1")], continue_chain=True)
    assert path == legacy
    assert [(line["uuid"], line["sessionId"], line["parentUuid"]) for line in lines_of(path)][1:] == [
        ("U1", SESSION, "U0")
    ]
    fresh = await store.record("s2", [user("V0")], cwd=CWD)
    assert fresh.path.name == f"{claude_session_id('s2')}.jsonl"


async def test_issue26_recorded_attachments_are_written_when_asked(store: TranscriptStore) -> None:
    """R7.5 writes no attachment of an external user's live session; a replayed recording keeps them."""
    note = AttachmentMessage.model_validate(
        {"type": "attachment", "uuid": "AT1", "timestamp": "2026-01-01T00:00:00.000Z",
         "attachment": {"type": "date", "date": "2026-11-27"}, "rendered": [{"content": "today"}],
         "renderedRole": "system"}
    )  # fmt: skip
    live = await store.record("live", [user("L0"), note.model_copy(update={"uuid": "AT0"})], cwd=CWD)
    assert [line["uuid"] for line in lines_of(live.path)] == ["L0"]
    replayed = await store.record("replayed", [user("R0"), note], cwd=CWD, recorded=True)
    written = lines_of(replayed.path)
    assert [line["uuid"] for line in written] == ["R0", "AT1"]
    assert (written[1]["rendered"], written[1]["renderedRole"]) == ([{"content": "today"}], "system")


# ---------------------------------------------------------------- record_ready (the worker's path without an await)
async def test_record_ready_writes_what_record_writes(tmp_path: Path) -> None:
    """Same lines, same result, as ``record(continue_chain=True)``; durable once its futures resolve."""
    batches: list[list[Message]] = [[user("U0")], [assistant("A1"), user("U2")], [user("U2"), assistant("A3")]]
    awaited = TranscriptStore(tmp_path / "awaited", StoreConfig(stamp=STAMP))
    ready = TranscriptStore(tmp_path / "ready", StoreConfig(stamp=STAMP))
    try:
        await awaited.record(SESSION, batches[0], cwd=CWD, continue_chain=True)
        await ready.record(SESSION, batches[0], cwd=CWD, continue_chain=True)  # opens the session
        for batch in batches[1:]:
            expected = await awaited.record(SESSION, batch, cwd=CWD, continue_chain=True)
            done = ready.record_ready(SESSION, batch, cwd=CWD)
            assert done is not None
            result, futures = done
            await asyncio.gather(*futures)
            assert (result.written, result.skipped, result.last_uuid) == (
                expected.written,
                expected.skipped,
                expected.last_uuid,
            )
        assert result.path.read_bytes() == expected.path.read_bytes()
    finally:
        await awaited.close()
        await ready.close()


async def test_record_ready_declines_a_session_not_open_or_locked(store: TranscriptStore) -> None:
    assert store.record_ready(SESSION, [user("U0")], cwd=CWD) is None  # not open: record() opens it
    await store.record(SESSION, [user("U0")], cwd=CWD)
    state = store._sessions[SESSION]
    async with state.lock:  # a removal in progress, say
        assert store.record_ready(SESSION, [assistant("A1")], cwd=CWD) is None
    assert store.record_ready(SESSION, [assistant("A1")], cwd=CWD) is not None
