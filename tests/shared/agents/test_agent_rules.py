"""Pure rules of sub-agents (agent-loop.md §A): A1 input and errors, A2 definitions, A3 ids/tools/model,
A5 the parent's result, A6 progress, A8 interrupt result, A9 limits, and when a child's turn is over."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from agentbus_redis.agents.definitions import (
    GENERAL_PURPOSE,
    GENERAL_PURPOSE_PROMPT,
    AgentCatalog,
    AgentDefinition,
    InvalidAgentDefinitions,
    child_model,
    child_permission_mode,
    child_tools,
    parse_definitions,
)
from agentbus_redis.agents.ids import (
    AGENT_ID_PATTERN,
    agent_id_for,
    child_session_id,
    depth_of,
    max_parent_length,
    parse_child_session,
    root_session_id,
)
from agentbus_redis.agents.limits import AgentLimits, child_deadline_ms, depth_problem, fan_out_problem
from agentbus_redis.agents.progress import agent_progress
from agentbus_redis.agents.results import (
    NO_ASSISTANT_MESSAGES,
    NO_OUTPUT_TEXT,
    ChildFacts,
    completed_result,
    cumulative_tokens,
    interrupted_result,
    wall_time_exceeded,
)
from agentbus_redis.agents.tool import (
    AgentInput,
    agent_denied,
    agent_not_found,
    agent_tool_definition,
    agent_type_of,
    denied_agent_types,
)
from agentbus_redis.agents.turn import turn_outcome
from agentbus_redis.messages.constants import INTERRUPT_MESSAGE_FOR_TOOL_USE, REJECT_MESSAGE, USER_REJECTED_TOOL_USE
from agentbus_redis.messages.content import TextBlock, ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.factories import (
    create_assistant_api_error_message,
    create_assistant_message,
    create_user_interruption_message,
    create_user_message,
)
from agentbus_redis.messages.kinds import AssistantMessage, TombstoneMessage, UserMessage
from agentbus_redis.permissions.rules import parse_rules
from agentbus_redis.session_ids import session_id_problem

FACTS = ChildFacts(
    agent_id="a0123456789abcdef", agent_type=GENERAL_PURPOSE, prompt="Find it", description="find", started_ms=1_000
)


def reply(
    content: str | list[object], *, usage: dict[str, int] | None = None, msg_id: str | None = None
) -> AssistantMessage:
    message = create_assistant_message(content)  # type: ignore[arg-type]
    update: dict[str, object] = {}
    if usage is not None:
        update["usage"] = usage
    if msg_id is not None:
        update["id"] = msg_id
    return message.model_copy(update={"message": message.message.model_copy(update=update)}) if update else message


# -- A3.1 ids -------------------------------------------------------------------------------------


def test_a3_1_agent_id_has_claude_codes_shape_and_is_stable_per_call() -> None:
    first = agent_id_for("s1", "toolu_1")
    assert AGENT_ID_PATTERN.fullmatch(first)
    assert first == agent_id_for("s1", "toolu_1")
    assert first != agent_id_for("s1", "toolu_2")
    assert first != agent_id_for("s2", "toolu_1")


def test_child_session_id_stays_in_the_session_id_grammar_and_parses_back() -> None:
    agent = agent_id_for("parent.1", "toolu_1")
    child = child_session_id("parent.1", agent)
    assert session_id_problem(child) is None
    parsed = parse_child_session(child)
    assert parsed is not None
    assert (parsed.parent_session_id, parsed.agent_id, parsed.root_session_id, parsed.depth) == (
        "parent.1",
        agent,
        "parent.1",
        1,
    )
    grandchild = child_session_id(child, agent_id_for(child, "toolu_9"))
    assert root_session_id(grandchild) == "parent.1"
    assert depth_of(grandchild) == 2
    assert parse_child_session("parent.1") is None
    assert parse_child_session(":agent-a0123456789abcdef") is None


def test_a_parent_id_without_room_for_the_suffix_cannot_start_agents() -> None:
    longest = "p" * max_parent_length()
    assert session_id_problem(child_session_id(longest, "a0123456789abcdef")) is None
    with pytest.raises(ValueError, match="cannot start sub-agents"):
        child_session_id(longest + "p", "a0123456789abcdef")


# -- A1 input, A1.3 errors ------------------------------------------------------------------------


def test_a1_2_input_requires_description_and_prompt_and_refuses_unknown_fields() -> None:
    assert AgentInput.model_validate({"description": "d", "prompt": "p"}).subagent_type is None
    with pytest.raises(ValidationError):
        AgentInput.model_validate({"prompt": "p"})
    assert AgentInput.model_validate({"description": "d", "prompt": "p", "run_in_background": True}).run_in_background
    with pytest.raises(ValidationError):
        AgentInput.model_validate({"description": "d", "prompt": "p", "isolation": "worktree"})
    with pytest.raises(ValidationError):
        AgentInput.model_validate({"description": "d", "prompt": "p", "model": "gpt"})
    assert agent_type_of(None) == GENERAL_PURPOSE


def test_a1_3_exact_error_texts() -> None:
    assert agent_not_found("x", ["general-purpose", "reviewer"]) == (
        "Agent type 'x' not found. Available agents: general-purpose, reviewer"
    )
    assert agent_denied("reviewer", "settings") == (
        "Agent type 'reviewer' has been denied by permission rule 'Agent(reviewer)' from settings."
    )


def test_a1_1_agent_type_deny_rules_hide_the_type_and_legacy_task_rules_count() -> None:
    rules = parse_rules(["Agent(reviewer)", "Task(explorer)", "Bash(rm:*)"], "deny")
    assert sorted(denied_agent_types(rules)) == ["explorer", "reviewer"]


def test_a1_1_tool_definition_lists_the_agent_types() -> None:
    reviewer = AgentDefinition(name="reviewer", description="Reviews diffs", prompt="Review.", tools=["Read", "Grep"])
    definition = agent_tool_definition(AgentCatalog.build([reviewer]).agents)
    assert definition.name == "Agent"
    assert "- general-purpose: General-purpose agent" in definition.description
    assert "(Tools: All tools)" in definition.description
    assert "- reviewer: Reviews diffs (Tools: Read, Grep)" in definition.description
    assert definition.input_schema["required"] == ["description", "prompt"]
    assert set(definition.input_schema["properties"]) == {  # type: ignore[arg-type]
        "description",
        "prompt",
        "subagent_type",
        "model",
        "run_in_background",
    }


# -- A2 definitions -------------------------------------------------------------------------------


def test_a2_1_general_purpose_is_built_in_and_a_configured_agent_may_replace_it() -> None:
    assert AgentCatalog.build([]).names == [GENERAL_PURPOSE]
    assert AgentCatalog.build([], builtins=False).names == []
    mine = AgentDefinition(name=GENERAL_PURPOSE, description="mine", prompt="p")
    assert AgentCatalog.build([mine]).get(GENERAL_PURPOSE) == mine


def test_a2_3_general_purpose_prompt_starts_with_claude_codes_text() -> None:
    assert GENERAL_PURPOSE_PROMPT.startswith(
        "You are an agent for Claude Code, Anthropic's official CLI for Claude. Given the user's message, you "
        "should use the tools available to complete the task."
    )


def test_a2_2_definitions_read_from_json_and_toml_with_sdk_field_names() -> None:
    document = {
        "agents": {
            "reviewer": {
                "description": "Reviews",
                "prompt": "Review the diff.",
                "tools": ["Read"],
                "disallowedTools": ["Bash"],
                "model": "haiku",
                "permissionMode": "plan",
                "maxTurns": 3,
            }
        }
    }
    (agent,) = parse_definitions(json.dumps(document), source="agents.json", toml=False)
    assert (agent.name, agent.disallowed_tools, agent.permission_mode, agent.max_turns) == (
        "reviewer",
        ["Bash"],
        "plan",
        3,
    )
    (toml_agent,) = parse_definitions(
        '[reviewer]\ndescription = "Reviews"\nprompt = "Review."\ntools = ["*"]\n', source="agents.toml", toml=True
    )
    assert toml_agent.all_tools


def test_a2_2_a_bad_definition_names_the_file_the_agent_and_the_field() -> None:
    with pytest.raises(InvalidAgentDefinitions, match=r"agents.json: agent 'reviewer': prompt: Field required"):
        parse_definitions('{"reviewer": {"description": "d"}}', source="agents.json", toml=False)
    with pytest.raises(InvalidAgentDefinitions, match="not valid JSON"):
        parse_definitions("{", source="agents.json", toml=False)


# -- A3.4 tools, A3.5 model -----------------------------------------------------------------------


def test_a3_4_children_lose_the_agent_tool_and_keep_only_listed_tools() -> None:
    pool = ["Read", "Agent", "Bash", "Grep", "AskUserQuestion"]
    everything = AgentDefinition(name="x", description="d", prompt="p", tools=["*"], disallowed_tools=["Bash"])
    assert child_tools(everything, pool) == (["Read", "Grep"], [])
    listed = AgentDefinition(name="x", description="d", prompt="p", tools=["Grep", "Read", "Nope"])
    assert child_tools(listed, pool) == (["Read", "Grep"], ["Nope"])
    assert child_tools(everything, pool, allow_nesting=True)[0] == ["Read", "Agent", "Grep"]


def test_a3_5_model_precedence() -> None:
    aliases = {"haiku": "claude-haiku-4-5", "opus": "claude-opus-4-1"}
    kwargs = {"aliases": aliases, "parent_model": "claude-opus-4-7"}
    assert child_model(call_model=None, definition_model=None, **kwargs) == "claude-opus-4-7"  # type: ignore[arg-type]
    assert child_model(call_model=None, definition_model="inherit", **kwargs) == "claude-opus-4-7"  # type: ignore[arg-type]
    assert child_model(call_model=None, definition_model="haiku", **kwargs) == "claude-haiku-4-5"  # type: ignore[arg-type]
    assert child_model(call_model="haiku", definition_model="claude-x", **kwargs) == "claude-haiku-4-5"  # type: ignore[arg-type]
    # the parent's own tier keeps its exact model string
    assert child_model(call_model="opus", definition_model=None, **kwargs) == "claude-opus-4-7"  # type: ignore[arg-type]
    assert child_model(call_model="haiku", definition_model=None, override="claude-pinned", **kwargs) == "claude-pinned"  # type: ignore[arg-type]


# -- A5 the parent's result -----------------------------------------------------------------------


def test_a5_2_exact_shape_text_then_agent_id_line_and_usage_trailer() -> None:
    usage = {"input_tokens": 100, "cache_creation_input_tokens": 10, "cache_read_input_tokens": 1, "output_tokens": 50}
    messages: list[UserMessage | AssistantMessage] = [
        create_user_message("Find it"),
        reply([ToolUseBlock(id="t1", name="Grep", input={"pattern": "x"})], msg_id="m1"),
        create_user_message([ToolResultBlock(tool_use_id="t1", content="found")]),
        reply("Found 3 call sites", usage=usage, msg_id="m2"),
    ]
    result = completed_result(FACTS, messages, now_ms=42_230)
    assert result.is_error is False
    assert [block.to_wire() for block in result.content] == [  # type: ignore[union-attr]
        {"type": "text", "text": "Found 3 call sites"},
        {
            "type": "text",
            "text": "agentId: a0123456789abcdef (use SendMessage with to: 'a0123456789abcdef' to continue this agent)\n"
            "<usage>total_tokens: 161\ntool_uses: 1\nduration_ms: 41230</usage>",
        },
    ]
    data = result.tool_use_result
    assert isinstance(data, dict)
    assert data["status"] == "completed"
    assert data["agentId"] == "a0123456789abcdef"
    assert data["totalToolUseCount"] == 1
    assert data["totalTokens"] == 161
    assert data["usage"] == usage
    assert data["content"] == [{"type": "text", "text": "Found 3 call sites"}]


def test_a5_1_content_falls_back_to_the_latest_text_and_a5_2_to_the_no_output_text() -> None:
    ended_on_tool_use = [reply("Earlier words"), reply([ToolUseBlock(id="t", name="Read", input={})])]
    assert completed_result(FACTS, ended_on_tool_use, now_ms=0).content[0].text == "Earlier words"  # type: ignore[union-attr]
    silent = [reply([ToolUseBlock(id="t", name="Read", input={})])]
    assert completed_result(FACTS, silent, now_ms=0).content[0].text == NO_OUTPUT_TEXT  # type: ignore[union-attr]


def test_a5_2_explore_and_plan_get_no_trailer() -> None:
    facts = ChildFacts(agent_id="a0123456789abcdef", agent_type="Explore", prompt="p", description="d", started_ms=0)
    assert len(completed_result(facts, [reply("done")], now_ms=0).content) == 1


def test_a5_5_no_assistant_message_is_an_error() -> None:
    result = completed_result(FACTS, [create_user_message("x")], now_ms=0)
    assert result.is_error
    assert result.content == f"<tool_use_error>{NO_ASSISTANT_MESSAGES}</tool_use_error>"


def test_a8_2_interrupted_child_gives_reject_message() -> None:
    result = interrupted_result()
    assert (result.content, result.is_error, result.tool_use_result) == (REJECT_MESSAGE, True, USER_REJECTED_TOOL_USE)


def test_a9_wall_time_error_names_the_agent() -> None:
    result = wall_time_exceeded(FACTS, 30)
    assert result.is_error
    assert result.content == (
        '<tool_use_error>Agent "find" (agentId: a0123456789abcdef) exceeded its wall-time limit of 30s and was '
        "stopped</tool_use_error>"
    )


def test_a9_cumulative_tokens_count_each_reply_once() -> None:
    usage = {"input_tokens": 10, "output_tokens": 5}
    split_reply = [reply("a", usage=usage, msg_id="m1"), reply("b", usage=usage, msg_id="m1")]
    assert cumulative_tokens([*split_reply, reply("c", usage=usage, msg_id="m2")]) == 30


# -- when a child's turn is over -------------------------------------------------------------------


def test_turn_is_over_on_a_final_reply_an_api_error_or_an_interruption() -> None:
    prompt = create_user_message("go")
    calling = reply([ToolUseBlock(id="t1", name="Read", input={})])
    assert turn_outcome([prompt]).state == "running"
    assert turn_outcome([prompt, calling]).state == "running"
    answered = create_user_message([ToolResultBlock(tool_use_id="t1", content="x")])
    assert turn_outcome([prompt, calling, answered]).state == "running"
    assert turn_outcome([prompt, calling, answered, reply("done")]).state == "completed"
    assert turn_outcome([prompt, create_assistant_api_error_message("API Error: 500")]).state == "completed"
    interrupted = create_user_interruption_message(tool_use=True)
    assert turn_outcome([prompt, calling, answered, interrupted]).state == "interrupted"
    assert INTERRUPT_MESSAGE_FOR_TOOL_USE in json.dumps(interrupted.to_wire())


def test_turn_ignores_tombstoned_messages_and_partial_blocks() -> None:
    prompt = create_user_message("go")
    final = reply("done")
    assert turn_outcome([prompt, final, TombstoneMessage(message=final)]).state == "running"
    partial = reply("thinking aloud").model_copy(
        update={"message": reply("x").message.model_copy(update={"stop_reason": None})}
    )
    assert turn_outcome([prompt, partial]).state == "running"


# -- A6 progress ----------------------------------------------------------------------------------


def test_a6_1_agent_progress_envelope_and_data() -> None:
    message = reply([ToolUseBlock(id="t1", name="Read", input={})])
    progress = agent_progress(
        message,
        agent_id="a0123456789abcdef",
        prompt="",
        parent_tool_use_id="toolu_parent",
        parent_message_id="msg_parent",
        parent_assistant_uuid="uuid-parent",
        timestamp="2026-11-25T00:00:00.000Z",
    )
    wire = progress.to_wire()
    assert wire["toolUseID"] == "agent_msg_parent"
    assert wire["parentToolUseID"] == "toolu_parent"
    assert wire["data"] == {
        "type": "agent_progress",
        "message": message.to_wire(),
        "prompt": "",
        "agentId": "a0123456789abcdef",
    }
    again = agent_progress(
        message,
        agent_id="a0123456789abcdef",
        prompt="",
        parent_tool_use_id="toolu_parent",
        parent_message_id=None,
        parent_assistant_uuid="uuid-parent",
        timestamp="later",
    )
    assert again.uuid == progress.uuid  # one progress message per child message, however often published
    assert again.tool_use_id == "agent_uuid-parent"


# -- A9 limits ------------------------------------------------------------------------------------


def test_a9_depth_fan_out_and_deadline() -> None:
    limits = AgentLimits(max_depth=1, max_children=2, wall_time_s=60)
    assert depth_problem(0, limits) is None
    assert depth_problem(1, limits) is not None
    assert fan_out_problem(2, limits) is None
    assert fan_out_problem(3, limits) is not None
    assert child_deadline_ms(started_ms=0, call_deadline_ms=1_000_000, limits=limits) == 60_000
    assert child_deadline_ms(started_ms=0, call_deadline_ms=30_000, limits=limits) == 25_000


def test_text_blocks_of_results_are_plain_text_blocks() -> None:
    assert TextBlock(text="x").to_wire() == {"type": "text", "text": "x"}


def test_a3_7_child_mode_is_the_definitions_unless_the_parent_bypasses_or_accepts_edits() -> None:
    planner = AgentDefinition(name="p", description="d", prompt="p", permission_mode="plan")
    plain = AgentDefinition(name="q", description="d", prompt="p")
    assert child_permission_mode(planner, "default") == "plan"
    assert child_permission_mode(planner, "bypassPermissions") == "bypassPermissions"
    assert child_permission_mode(planner, "acceptEdits") == "acceptEdits"
    assert child_permission_mode(plain, "dontAsk") == "dontAsk"


def test_a6_1_shell_progress_of_a_child_is_forwarded_with_its_own_ids() -> None:
    from agentbus_redis.agents.progress import forwarded_shell_progress
    from agentbus_redis.messages.factories import create_progress_message

    bash = create_progress_message(
        tool_use_id="toolu_child_bash",
        parent_tool_use_id="toolu_child_bash",
        data={"type": "bash_progress", "output": "x"},
    )
    forwarded = forwarded_shell_progress(bash, parent_tool_use_id="toolu_agent")
    assert forwarded is not None
    assert (forwarded.tool_use_id, forwarded.parent_tool_use_id, forwarded.data) == (
        "toolu_child_bash",
        "toolu_agent",
        bash.data,
    )
    assert forwarded.uuid != bash.uuid
    assert forwarded_shell_progress(bash, parent_tool_use_id="toolu_agent") == forwarded  # stable: one message
    hook = create_progress_message(tool_use_id="t", parent_tool_use_id="t", data={"type": "hook_progress"})
    assert forwarded_shell_progress(hook, parent_tool_use_id="toolu_agent") is None
