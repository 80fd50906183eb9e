"""The per-message fold of normalizeMessagesForAPI (R4.5–R4.8), through ``normalize_messages_for_api``."""

from __future__ import annotations

from agentbus_redis.ids import SequentialIds
from agentbus_redis.messages.constants import TOOL_REFERENCES_REMOVED_NO_SEARCH, TOOL_REFERENCES_REMOVED_UNAVAILABLE
from agentbus_redis.messages.content import ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.factories import create_assistant_api_error_message, create_local_command_message
from agentbus_redis.messages.kinds import AssistantMessage, Message, UserMessage
from agentbus_redis.normalize import NormalizeOptions, RepairKind, normalize_messages_for_api
from tests.shared.normalize_builders import (
    assistant,
    attachment,
    image,
    shape,
    text,
    thinking,
    tool_reference,
    tool_result,
    tool_use,
    user,
    wire,
)

DEFAULT = NormalizeOptions()


def _normalize(messages: list[Message], options: NormalizeOptions = DEFAULT) -> list[UserMessage | AssistantMessage]:
    result, _report = normalize_messages_for_api(messages, options=options)
    return result


def test_r4_5_local_command_becomes_user_and_merges() -> None:
    """R4.5: a local_command system message becomes a user message with its uuid/timestamp, merged
    into a preceding user message (R4.10 seam)."""
    command = create_local_command_message("<local-command-stdout>$1.20</local-command-stdout>", ids=SequentialIds(7))
    alone = _normalize([command])
    assert len(alone) == 1
    assert alone[0].uuid == command.uuid
    assert alone[0].timestamp == command.timestamp
    assert alone[0].message.content == "<local-command-stdout>$1.20</local-command-stdout>"
    merged = _normalize([user("/cost"), command])
    assert wire(merged[0]) == [
        {"type": "text", "text": "/cost\n"},
        {"type": "text", "text": "<local-command-stdout>$1.20</local-command-stdout>"},
    ]


def test_r4_6_tool_references_stripped_without_tool_search() -> None:
    """R4.6 step 1 (tool search off): every tool_reference goes; an emptied tool_result gets
    ``[Tool references removed - tool search not enabled]``; no ``Tool loaded.`` sibling remains."""
    tr_only_refs = tool_result("t1", [tool_reference("Grep")])
    tr_mixed = tool_result("t2", [tool_reference("Glob"), text("found")])
    result, report = normalize_messages_for_api(
        [assistant(tool_use("t1"), tool_use("t2")), user([tr_only_refs, tr_mixed])], options=DEFAULT
    )
    blocks = result[1].blocks
    assert [block.to_wire() for block in blocks] == [
        {
            "type": "tool_result",
            "tool_use_id": "t1",
            "content": [{"type": "text", "text": TOOL_REFERENCES_REMOVED_NO_SEARCH}],
        },
        {"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": "found"}]},
    ]
    assert report.count(RepairKind.TOOL_REFERENCE_REMOVED) == 2


def test_r4_6_unavailable_tool_references_with_tool_search() -> None:
    """R4.6 step 1 (tool search on): only references to tools no longer present go (legacy names are
    normalized first); step 3 then adds the ``Tool loaded.`` sibling (gate OFF)."""
    options = NormalizeOptions(tool_search_enabled=True, tool_names=frozenset({"Agent", "Bash"}))
    gone = tool_result("t1", [tool_reference("mcp__old__tool")])
    kept = tool_result("t2", [tool_reference("Task")])  # legacy alias of Agent
    result = _normalize([assistant(tool_use("t1"), tool_use("t2")), user([gone, kept])], options)
    assert wire(result[1]) == [
        {
            "type": "tool_result",
            "tool_use_id": "t1",
            "content": [{"type": "text", "text": TOOL_REFERENCES_REMOVED_UNAVAILABLE}],
        },
        {"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "tool_reference", "tool_name": "Task"}]},
        {"type": "text", "text": "Tool loaded."},
    ]


def test_r4_6_tool_loaded_sibling_is_idempotent_and_gated() -> None:
    """R4.6 step 3: appended once (an existing ``Tool loaded.…`` text prevents it, e.g. a tagged one),
    never inside the tool_result; not added when ``tengu_toolref_defer_j8m`` is ON."""
    options = NormalizeOptions(tool_search_enabled=True)
    with_ref = tool_result("t1", [tool_reference("Grep")])
    once = _normalize([assistant(tool_use("t1")), user([with_ref])], options)
    assert [block.type for block in once[1].blocks] == ["tool_result", "text"]
    again = _normalize([assistant(tool_use("t1")), user([with_ref, text("Tool loaded.\n[id:abc]")])], options)
    assert [block.type for block in again[1].blocks] == ["tool_result", "text"]
    gated = _normalize(
        [assistant(tool_use("t1")), user([with_ref])], options.model_copy(update={"toolref_defer": True})
    )
    assert [block.type for block in gated[1].blocks] == ["tool_result"]


def test_r4_6_strip_target_media_removed_and_emptied_message_dropped() -> None:
    """R4.6 step 2: the meta user message before an image error loses its images; emptied, it is dropped."""
    error_text = "Image was too large. Double press esc to go back and try again with a smaller image."
    meta_with_text = user([image(), text("pasted")], is_meta=True)
    error = create_assistant_api_error_message(error_text, ids=SequentialIds(40))
    result, report = normalize_messages_for_api([user("look"), meta_with_text, error], options=DEFAULT)
    assert wire(result[0]) == [{"type": "text", "text": "look\n"}, {"type": "text", "text": "pasted"}]
    assert report.count(RepairKind.MEDIA_STRIPPED_AFTER_ERROR) == 1
    only_image = user([image()], is_meta=True)
    error2 = create_assistant_api_error_message(error_text, ids=SequentialIds(50))
    assert shape(_normalize([user("look"), only_image, error2])) == ["U[text]"]


def test_r4_7_streaming_split_example() -> None:
    """R4.7 example (R9.4): ``[U0, A1{id:X,[t1]}, TR1, A2{id:X,[t2]}, TR2]`` →
    ``[U0, A1'{id:X,[t1,t2]}, TR'{[tr t1, tr t2]}]``."""
    u0 = user("run both")
    a1, a2 = assistant(tool_use("t1"), msg_id="X"), assistant(tool_use("t2"), msg_id="X")
    tr1, tr2 = user([tool_result("t1")]), user([tool_result("t2")])
    result = _normalize([u0, a1, tr1, a2, tr2])
    assert shape(result) == ["U[text]", "A[tool_use,tool_use]", "U[tool_result,tool_result]"]
    assert result[1].uuid == a1.uuid
    assert [block.tool_use_id for block in result[2].blocks if isinstance(block, ToolResultBlock)] == ["t1", "t2"]


def test_r4_7_same_id_merge_walks_back_over_other_ids_and_keeps_thinking() -> None:
    """R4.7 step 2: the walk skips tool-result users and other-id assistants; merged content keeps
    thinking blocks byte-identical and in order; a plain user message stops the walk."""
    think = thinking("plan it", "EqQBCkgIARABGAIiQ...sig")
    a1 = assistant(think, msg_id="X")
    other = assistant(text("teammate"), msg_id="Y")
    a2 = assistant(tool_use("t1"), msg_id="X")
    result = _normalize([user("go"), a1, other, a2])
    assert shape(result) == ["U[text]", "A[thinking,tool_use]", "A[text]"]
    assert wire(result[1])[0] == {"type": "thinking", "thinking": "plan it", "signature": "EqQBCkgIARABGAIiQ...sig"}
    stopped = _normalize([user("go"), a1, user("interrupt"), a2])
    assert shape(stopped) == ["U[text]", "A[thinking]", "U[text]", "A[tool_use]"]


def test_r4_7_tool_use_rebuilt_without_extra_keys_and_canonical_name() -> None:
    """R4.7 step 1 (tool search off): ``{type, id, name, input}`` only (``caller`` dropped); a legacy
    alias gets the canonical name; unknown tools keep name and input."""
    block = tool_use("t1", "Task", {"prompt": "x"}, caller={"type": "direct"})
    unknown = tool_use("t2", "mcp__srv__thing", {"plan": "kept"})
    result, report = normalize_messages_for_api([user("q"), assistant(block, unknown)], options=DEFAULT)
    assert wire(result[1]) == [
        {"type": "tool_use", "id": "t1", "name": "Agent", "input": {"prompt": "x"}},
        {"type": "tool_use", "id": "t2", "name": "mcp__srv__thing", "input": {"plan": "kept"}},
    ]
    assert report.count(RepairKind.TOOL_NAME_CANONICALIZED) == 1
    assert report.count(RepairKind.TOOL_USE_EXTRA_KEYS_DROPPED) == 1
    with_search = _normalize([user("q"), assistant(block)], NormalizeOptions(tool_search_enabled=True))
    assert wire(with_search[1]) == [
        {"type": "tool_use", "id": "t1", "name": "Agent", "input": {"prompt": "x"}, "caller": {"type": "direct"}}
    ]


def test_r4_7_tool_specific_input_rules() -> None:
    """R4.7: ExitPlanMode drops ``plan``/``planFilePath``; Edit drops legacy ``old_string``/
    ``new_string``/``replace_all`` only when ``edits`` is present; a tool not in the known set keeps
    its input."""
    plan = tool_use("t1", "ExitPlanMode", {"plan": "# Plan", "planFilePath": "/p.md", "allowedPrompts": []})
    edit = tool_use(
        "t2", "Edit", {"file_path": "a", "edits": [], "old_string": "x", "new_string": "y", "replace_all": False}
    )
    plain_edit = tool_use("t3", "Edit", {"file_path": "a", "old_string": "x", "new_string": "y"})
    result = _normalize([user("q"), assistant(plan, edit, plain_edit)])
    inputs = [block.input for block in result[1].blocks if isinstance(block, ToolUseBlock)]
    assert inputs == [{"allowedPrompts": []}, {"file_path": "a", "edits": []}, plain_edit.input]
    not_current = NormalizeOptions(tool_names=frozenset({"Bash"}))
    kept = _normalize([user("q"), assistant(plan)], not_current)
    assert [b.input for b in kept[1].blocks if isinstance(b, ToolUseBlock)] == [plan.input]


def test_r4_8_attachment_after_user_folds_into_it() -> None:
    """R4.8: after a user message every produced message is folded in with R4.11 (here the legacy
    fold into a string tool_result)."""
    hook = attachment({"type": "hook_stopped_continuation", "hookName": "Stop", "message": "halt"})
    result = _normalize([assistant(tool_use("t1")), user([tool_result("t1", "done")]), hook])
    assert wire(result[1]) == [
        {
            "type": "tool_result",
            "tool_use_id": "t1",
            "content": "done\n\n<system-reminder>\nStop hook stopped continuation: halt\n</system-reminder>",
        }
    ]


def test_r4_8_attachments_after_assistant_are_pushed_unmerged() -> None:
    """R4.8: after a non-user entry all produced messages are pushed (consecutive users, not merged
    here); a following user message then merges into the last of them (R4.10)."""
    file_read = attachment(
        {
            "type": "file",
            "filename": "/a.png",
            "content": {"type": "image", "file": {"base64": "AAAA", "type": "image/png"}},
        }
    )
    result = _normalize([user("q"), assistant(text("a")), file_read])
    assert shape(result) == ["U[text]", "A[text]", "U[text]", "U[image]"]


def test_r4_8_chair_sermon_wraps_unwrapped_texts() -> None:
    """R4.8 (gate ``tengu_chair_sermon``): produced texts get ``<system-reminder>`` unless they already
    start with it (queued prompts are already wrapped, so nothing changes for them)."""
    queued = attachment({"type": "queued_command", "prompt": "also this"})
    plain = _normalize([assistant(text("a")), queued])
    gated = _normalize([assistant(text("a")), queued], NormalizeOptions(chair_sermon=True))
    assert plain[1].message.content == gated[1].message.content
    assert str(gated[1].message.content).startswith("<system-reminder>\nThe user sent a new message")
