"""M1: the request the model worker sends (M1.1 fields and order, M1.3 metadata, M1.4 system, M1.5
max_tokens, M1.6 thinking/temperature, M1.7 non-streaming fallback, M1.8 tools), with M9 markers, A3.6
sub-agents and the M6 model switch."""

from __future__ import annotations

import copy
import inspect
import json

import pytest
from anthropic.resources.messages import AsyncMessages
from hypothesis import given
from hypothesis import strategies as st

from agentbus_redis.api.validation import validate_api_request
from agentbus_redis.json_types import JsonObject
from agentbus_redis.model.cache import MAX_CACHE_BREAKPOINTS, count_cache_breakpoints
from agentbus_redis.model.request import (
    AGENT_SDK_PREFIX,
    CLI_PREFIX,
    CREATE_KEYWORDS,
    InvalidStoredRequest,
    ModelDefaults,
    build_model_params,
    fallback_model,
    metadata_user_id,
    non_streaming_fallback_params,
    request_body,
    tool_wire,
    unknown_tool_names,
    with_max_tokens,
    with_model,
)
from agentbus_redis.model.session_config import SessionModelConfig
from agentbus_redis.model.thinking import open_turn_assistants
from agentbus_redis.tools.definitions import ToolDefinition
from tests.shared.model.api_builders import MARKER, assistant, messages, text, thinking, tool_result, tool_use, user

SESSION = "3f2a0c9e-0000-4000-8000-000000000001"
DEFAULTS = ModelDefaults(model="claude-sonnet-4-5", device_id="d1", system_prompt="Be brief.")
CATALOG = [
    ToolDefinition(name="Bash", description="Run", input_schema={"type": "object"}, strict=True),
    ToolDefinition(name="Read", description="Read a file", input_schema={"type": "object"}),
]


def build(
    request: JsonObject | None = None,
    config: SessionModelConfig | None = None,
    defaults: ModelDefaults = DEFAULTS,
    tools: list[ToolDefinition] | None = None,
) -> JsonObject:
    """The JSON body sent (``extra_body`` merged)."""
    return request_body(build_sdk(request, config, defaults, tools))


def build_sdk(
    request: JsonObject | None = None,
    config: SessionModelConfig | None = None,
    defaults: ModelDefaults = DEFAULTS,
    tools: list[ToolDefinition] | None = None,
) -> JsonObject:
    """The keyword arguments of ``messages.create``."""
    return build_model_params(
        request if request is not None else {"messages": [user("hi")]},
        session_id=SESSION,
        config=config or SessionModelConfig(),
        defaults=defaults,
        tools=CATALOG if tools is None else tools,
    )


def test_m1_1_fields_in_order_absent_ones_omitted() -> None:
    params = build_sdk()
    assert list(params) == ["model", "messages", "system", "tools", "metadata", "max_tokens", "thinking"]
    params = build_sdk(config=SessionModelConfig(thinking={"type": "disabled"}), tools=[])
    assert list(params) == ["model", "messages", "system", "metadata", "max_tokens", "extra_body"]
    assert list(request_body(params)) == ["model", "messages", "system", "metadata", "max_tokens", "temperature"]


def test_m1_6_temperature_left_out_for_models_that_reject_it() -> None:
    params = build(config=SessionModelConfig(model="claude-opus-4-7", thinking={"type": "disabled"}))
    assert "temperature" not in request_body(params)


def test_m1_1_sdk_takes_every_key_as_keyword() -> None:
    """The params are ``messages.create(**params, stream=True)``: every key is one of its keywords."""
    signature = inspect.signature(AsyncMessages.create)
    assert set(signature.parameters) >= CREATE_KEYWORDS
    request = {"messages": [user("hi")], "tool_choice": {"type": "auto"}, "context_management": {"edits": []}}
    signature.bind(object(), **build_sdk(request), stream=True)
    signature.bind(object(), **build_sdk(config=SessionModelConfig(thinking={"type": "disabled"})), stream=True)


def test_m1_1_stored_request_keys_pass_through() -> None:
    request = {
        "messages": [user("hi")],
        "stream": False,
        "stop_sequences": ["END"],
        "tool_choice": {"type": "auto"},
        "context_management": {"edits": []},
        "max_tokens": 5,
    }
    params = build_sdk(request)
    assert list(params)[:5] == ["model", "messages", "system", "tools", "tool_choice"]
    assert params["stop_sequences"] == ["END"]
    assert params["extra_body"] == {"context_management": {"edits": []}}
    assert "stream" not in params
    assert params["max_tokens"] == 32_000


@pytest.mark.parametrize("request_body_", [{}, {"messages": "hi"}])
def test_m1_8_stored_request_without_messages_list_is_a_typed_error(request_body_: JsonObject) -> None:
    with pytest.raises(InvalidStoredRequest) as raised:
        build(request_body_)
    assert raised.value.field == "messages"


def test_m1_3_metadata_user_id_is_a_json_string() -> None:
    params = build()
    assert params["metadata"] == {
        "user_id": '{"device_id":"d1","account_uuid":"","session_id":"3f2a0c9e-0000-4000-8000-000000000001"}'
    }


def test_m1_3_extra_metadata_keys_come_first() -> None:
    value = metadata_user_id(device_id="d", session_id="s", extra={"team": "x", "device_id": "ignored"})
    assert list(json.loads(value)) == ["team", "device_id", "account_uuid", "session_id"]
    assert json.loads(value)["device_id"] == "d"


def test_m1_4_system_prefix_block_and_rest_block_cached() -> None:
    params = build()
    assert params["system"] == [
        {"type": "text", "text": AGENT_SDK_PREFIX, "cache_control": MARKER},
        {"type": "text", "text": "Be brief.", "cache_control": MARKER},
    ]


def test_m1_4_rest_block_omitted_without_system_prompt() -> None:
    params = build(defaults=ModelDefaults(model="claude-sonnet-4-5"))
    assert params["system"] == [{"type": "text", "text": AGENT_SDK_PREFIX, "cache_control": MARKER}]


def test_m1_4_rest_from_session_then_stored_request() -> None:
    assert build(config=SessionModelConfig(system_prompt="Agent prompt."))["system"][1]["text"] == "Agent prompt."
    stored = {
        "messages": [user("hi")],
        "system": [text("x-anthropic-billing-header: cc_version=1;"), text(CLI_PREFIX), text("One."), text("Two.")],
    }
    params = build(stored, config=SessionModelConfig(system_prompt="ignored"))
    assert [block["text"] for block in params["system"]] == [CLI_PREFIX, "One.\n\nTwo."]
    assert build({"messages": [user("hi")], "system": "Plain."})["system"][1]["text"] == "Plain."


def test_m1_4_empty_session_system_prompt_means_no_rest_block() -> None:
    assert len(build(config=SessionModelConfig(system_prompt=""))["system"]) == 1


def test_m6_1_fallback_model_session_then_worker_never_the_main_model() -> None:
    defaults = ModelDefaults(model="claude-opus-4-6", fallback_model="claude-sonnet-4-6")
    assert fallback_model(SessionModelConfig(), defaults, model="claude-opus-4-6") == "claude-sonnet-4-6"
    config = SessionModelConfig(fallback_model="claude-haiku-4-5")
    assert fallback_model(config, defaults, model="claude-opus-4-6") == "claude-haiku-4-5"
    assert fallback_model(SessionModelConfig(), defaults, model="claude-sonnet-4-6") is None
    assert fallback_model(SessionModelConfig(), DEFAULTS, model="claude-sonnet-4-5") is None


def test_m1_5_max_tokens_default_and_bounded_override() -> None:
    assert build()["max_tokens"] == 32_000
    assert build(config=SessionModelConfig(max_tokens=100_000))["max_tokens"] == 64_000
    assert build(defaults=ModelDefaults(model="claude-opus-4-1", max_tokens=40_000))["max_tokens"] == 32_000
    assert build(config=SessionModelConfig(model="claude-opus-4-6"))["max_tokens"] == 64_000


def test_m1_5_model_precedence_session_then_request_then_default() -> None:
    assert build()["model"] == "claude-sonnet-4-5"
    assert build({"messages": [user("hi")], "model": "claude-opus-4-5"})["model"] == "claude-opus-4-5"
    config = SessionModelConfig(model="claude-haiku-4-5")
    assert build({"messages": [user("hi")], "model": "claude-opus-4-5"}, config=config)["model"] == "claude-haiku-4-5"


def test_m1_6_budget_thinking_without_temperature() -> None:
    """Sonnet 4.5: budget = min(max_tokens − 1, upper − 1) = min(31 999, 63 999)."""
    params = build()
    assert params["thinking"] == {"type": "enabled", "budget_tokens": 31_999}
    assert "temperature" not in params


def test_m1_6_adaptive_thinking_for_models_that_support_it() -> None:
    for model in ("claude-opus-4-6", "claude-sonnet-4-6", "claude-opus-4-7", "claude-fable-5"):
        assert build(config=SessionModelConfig(model=model))["thinking"] == {"type": "adaptive"}, model


def test_m1_6_configured_budget_capped_below_max_tokens() -> None:
    config = SessionModelConfig(thinking={"type": "enabled", "budget_tokens": 4_000})
    assert build(config=config)["thinking"] == {"type": "enabled", "budget_tokens": 4_000}
    config = SessionModelConfig(max_tokens=3_000, thinking={"type": "enabled", "budget_tokens": 4_000})
    assert build(config=config)["thinking"] == {"type": "enabled", "budget_tokens": 2_999}


def test_m1_6_budget_below_api_minimum_omits_thinking() -> None:
    params = build(config=SessionModelConfig(max_tokens=1_000))
    assert "thinking" not in params
    assert params["temperature"] == 1.0


def test_m1_6_thinking_off_sends_temperature_override_or_one() -> None:
    off = SessionModelConfig(thinking={"type": "disabled"})
    assert build(config=off)["temperature"] == 1.0
    defaults = ModelDefaults(model="claude-sonnet-4-5", temperature=0.2)
    assert build(config=off, defaults=defaults)["temperature"] == 0.2
    assert build(defaults=ModelDefaults(model="x", thinking={"type": "disabled"}))["temperature"] == 1.0


def test_m1_6_models_without_thinking() -> None:
    for model in ("claude-3-5-sonnet-20241022", "claude-3-7-sonnet-20250219", "claude-3-haiku-20240307"):
        params = build(config=SessionModelConfig(model=model))
        assert "thinking" not in params, model
        assert params["temperature"] == 1.0, model


def test_a3_6_sub_agent_runs_without_thinking() -> None:
    config = SessionModelConfig(agent_id="a3f9c2e71b04d5a68", thinking={"type": "adaptive"}, model="claude-opus-4-6")
    params = build(config=config)
    assert "thinking" not in params
    assert params["temperature"] == 1.0


def test_api_1_10_tool_loop_without_leading_thinking_goes_without_thinking() -> None:
    """A tool loop whose first reply did not think (or whose thinking was stripped: unsigned, another
    model's) cannot enable thinking now: a 400 ("must start with a thinking block"). One whose reply
    thought, passed back by the normalizer (``thinking_enabled=None``), goes on with thinking."""
    loop = [user("q"), assistant(text("let me look"), tool_use("t1")), user(tool_result("t1"))]
    params = build({"messages": loop})
    assert "thinking" not in params
    assert params["temperature"] == 1.0
    with_thinking = [user("q"), assistant(thinking(), tool_use("t1")), user(tool_result("t1"))]
    assert build({"messages": with_thinking})["thinking"] == {"type": "enabled", "budget_tokens": 31_999}


def test_api_1_10_thinking_off_strips_open_turn_thinking_only() -> None:
    history = [
        user("old"),
        assistant(thinking("old"), text("old answer")),
        user("q"),
        assistant(thinking(), tool_use("t1")),
        user(tool_result("t1")),
    ]
    params = build({"messages": history}, config=SessionModelConfig(thinking={"type": "disabled"}))
    sent = params["messages"]
    assert sent[1] == history[1]
    assert sent[3] == assistant(tool_use("t1"))


def test_m1_8_tools_from_catalog_filtered_unknown_keys_kept() -> None:
    assert build()["tools"] == [
        {"name": "Bash", "description": "Run", "input_schema": {"type": "object"}, "strict": True},
        {"name": "Read", "description": "Read a file", "input_schema": {"type": "object"}},
    ]
    params = build(config=SessionModelConfig(tools=["Read", "Nope"]))
    assert [tool["name"] for tool in params["tools"]] == ["Read"]
    assert "tools" not in build(config=SessionModelConfig(tools=[]))
    assert unknown_tool_names(CATALOG, ["Read", "Nope"]) == ["Nope"]


@pytest.mark.parametrize(
    "tool",
    [
        ToolDefinition(name="A", input_schema={"type": "object"}),
        ToolDefinition(name="B", description="", input_schema={}),
        ToolDefinition(
            name="C", description="d", input_schema={"a": [1]}, strict=True, cache_control={"type": "ephemeral"}
        ),
        ToolDefinition.model_validate({"input_schema": {}, "defer_loading": True, "name": "D"}),
    ],
)
def test_m1_8_tool_wire_equals_to_wire(tool: ToolDefinition) -> None:
    assert tool_wire(tool) == tool.to_wire()
    assert list(tool_wire(tool)) == list(tool.to_wire())


def test_m9_4_messages_carry_one_marker_on_last_block() -> None:
    params = build({"messages": [user("a"), assistant(text("b")), user(text("c"), text("d"))]})
    assert params["messages"][-1] == user(text("c"), text("d", cache_control=MARKER))
    assert count_cache_breakpoints(params) == 3


@given(
    messages(),
    st.sampled_from(["claude-sonnet-4-5", "claude-opus-4-6", "claude-3-5-haiku", "claude-mythos-5"]),
    st.sampled_from([None, {"type": "disabled"}, {"type": "enabled", "budget_tokens": 2_048}]),
    st.booleans(),
)
def test_m9_1_build_never_exceeds_four_markers_and_never_mutates(
    history: list[JsonObject], model: str, thinking_config: JsonObject | None, sub_agent: bool
) -> None:
    request: JsonObject = {"messages": history}
    before = copy.deepcopy(request)
    catalog = [ToolDefinition(name=f"T{i}", input_schema={}, cache_control={"type": "ephemeral"}) for i in range(3)]
    config = SessionModelConfig(model=model, thinking=thinking_config, agent_id="a1" if sub_agent else None)
    params = build(request, config=config, tools=catalog)
    assert request == before
    assert count_cache_breakpoints(params) <= MAX_CACHE_BREAKPOINTS
    assert ("thinking" in params) != ("temperature" in params)
    if sub_agent:
        assert "thinking" not in params
    fallback = non_streaming_fallback_params(params)
    switched = with_model(params, "claude-haiku-4-5")
    assert count_cache_breakpoints(switched) <= MAX_CACHE_BREAKPOINTS
    assert request == before
    assert fallback["max_tokens"] <= 64_000


def test_m1_7_non_streaming_fallback_caps_max_tokens_and_budget() -> None:
    params = build(
        config=SessionModelConfig(model="claude-opus-4-6", max_tokens=128_000, thinking={"type": "disabled"})
    )
    fallback = non_streaming_fallback_params(params)
    assert fallback["max_tokens"] == 64_000
    assert fallback["timeout"] == 300.0
    assert params["max_tokens"] == 128_000
    enabled = {
        "model": "m",
        "messages": [],
        "max_tokens": 100_000,
        "thinking": {"type": "enabled", "budget_tokens": 99_999},
    }
    assert non_streaming_fallback_params(enabled)["thinking"] == {"type": "enabled", "budget_tokens": 63_999}
    small = {"model": "m", "messages": [], "max_tokens": 8_000, "thinking": {"type": "enabled", "budget_tokens": 4_000}}
    assert non_streaming_fallback_params(small)["thinking"] == {"type": "enabled", "budget_tokens": 4_000}


def test_m4_11_with_max_tokens_lowers_budget() -> None:
    params = build()
    lowered = with_max_tokens(params, 10_941)
    assert lowered["max_tokens"] == 10_941
    assert lowered["thinking"] == {"type": "enabled", "budget_tokens": 10_940}
    assert params["max_tokens"] == 32_000
    tiny = request_body(with_max_tokens(params, 1_000))
    assert "thinking" not in tiny
    assert tiny["temperature"] == 1.0


def test_m6_with_model_rederives_max_tokens_and_thinking() -> None:
    params = build(config=SessionModelConfig(model="claude-opus-4-6"))
    assert (params["max_tokens"], params["thinking"]) == (64_000, {"type": "adaptive"})
    switched = with_model(params, "claude-sonnet-4-5")
    assert switched["model"] == "claude-sonnet-4-5"
    assert switched["max_tokens"] == 32_000
    assert switched["thinking"] == {"type": "enabled", "budget_tokens": 31_999}
    assert params["model"] == "claude-opus-4-6"


def test_m6_with_model_keeps_override_bounded_and_thinking_off() -> None:
    params = build(
        config=SessionModelConfig(model="claude-opus-4-6", max_tokens=100_000, thinking={"type": "disabled"})
    )
    switched = request_body(with_model(params, "claude-sonnet-4-5"))
    assert switched["max_tokens"] == 64_000
    assert "thinking" not in switched
    assert switched["temperature"] == 1.0


def test_m6_6_with_model_strips_thinking_blocks_and_replaces_marker() -> None:
    history = [user("q"), assistant(thinking(), text("a")), user("more"), assistant(thinking())]
    params = build({"messages": history}, config=SessionModelConfig(model="claude-opus-4-6"))
    switched = with_model(params, "claude-sonnet-4-5")
    sent = switched["messages"]
    assert sent[1] == assistant(text("a"))
    assert sent[-1] == user(text("more", cache_control=MARKER))
    assert count_cache_breakpoints(switched) == 3


@pytest.mark.parametrize("model", ["claude-opus-4-6", "claude-sonnet-4-5"])
def test_m6_with_same_model_is_a_copy(model: str) -> None:
    params = build_sdk(config=SessionModelConfig(model=model))
    assert with_model(params, model) == params
    assert with_model(params, model) is not params


THINKING_MODE_RULES = {"missing_leading_thinking", "thinking_while_disabled"}


@given(
    messages(),
    st.sampled_from(["claude-sonnet-4-5", "claude-opus-4-1", "claude-3-5-haiku"]),
    st.sampled_from([None, {"type": "disabled"}]),
)
def test_api_1_10_built_request_passes_the_thinking_mode_rules(
    history: list[JsonObject], model: str, thinking_config: JsonObject | None
) -> None:
    """Whatever the history, the request sent breaks neither thinking-mode rule of api/validation
    (a tool loop without leading thinking goes without thinking; with thinking off the open turn holds
    none) — except where an open-turn message holds nothing but thinking (it cannot be fixed here)."""
    body = build({"messages": history}, config=SessionModelConfig(model=model, thinking=thinking_config))
    sent = body["messages"]
    if any(_only_thinking(sent[index]) for index in open_turn_assistants(sent)):
        return
    violations = validate_api_request(body, allow_prefill=True)
    assert [v for v in violations if v.rule in THINKING_MODE_RULES] == []


def _only_thinking(message: JsonObject) -> bool:
    content = message.get("content")
    return (
        isinstance(content, list)
        and bool(content)
        and all(isinstance(b, dict) and b.get("type") in ("thinking", "redacted_thinking") for b in content)
    )
