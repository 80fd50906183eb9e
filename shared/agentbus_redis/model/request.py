"""The Messages API request the model worker sends for one turn (agent-loop.md M1, M9, A3.6).

:func:`build_model_params` turns the normalizer's stored request (``{"messages": [...]}``, maybe
``"model"`` and ``"system"``) into the keyword arguments of ``AsyncAnthropic().messages.create(**params,
stream=True)``. Its fields follow M1.1's order, absent ones omitted: ``model``, ``messages``, ``system``,
``tools``, ``tool_choice``, ``metadata``, ``max_tokens``, ``thinking``, ``temperature``, then any other
key of the stored request. Fields ``messages.create`` does not take as keyword arguments — in anthropic
2.13 that includes ``temperature`` — go into ``extra_body``, which the SDK merges into the JSON body (it
rejects unknown keyword arguments); :func:`request_body` gives the body as sent.

Nothing here mutates its input; results share unchanged sub-objects (message dicts, blocks) with it,
so treat both as read-only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from agentbus_redis.errors import AgentbusError
from agentbus_redis.json_types import JsonObject, JsonValue
from agentbus_redis.model.cache import CacheTtl, apply_cache_breakpoints
from agentbus_redis.model.limits.max_tokens import (
    DEFAULT_MAX_TOKENS_TABLE,
    MaxTokensTable,
    default_max_tokens,
    max_tokens_upper_limit,
    resolve_max_tokens,
)
from agentbus_redis.model.sdk_params import CREATE_KEYWORDS, SDK_OPTIONS, options_of, request_body, sdk_params
from agentbus_redis.model.session_config import SessionModelConfig
from agentbus_redis.model.thinking import (
    DEFAULT_THINKING_CAPABILITIES,
    DISABLED_THINKING,
    MIN_THINKING_BUDGET,
    ThinkingCapabilities,
    open_turn_blocks_thinking,
    strip_open_turn_thinking,
    strip_thinking,
    thinking_budget,
    thinking_param,
)
from agentbus_redis.normalize.thinking_replay import same_model
from agentbus_redis.tools.definitions import ToolDefinition

CLI_PREFIX: Final = "You are Claude Code, Anthropic's official CLI for Claude."
AGENT_SDK_CLAUDE_CODE_PRESET_PREFIX: Final = (
    "You are Claude Code, Anthropic's official CLI for Claude, running within the Claude Agent SDK."
)
AGENT_SDK_PREFIX: Final = "You are a Claude agent, built on Anthropic's Claude Agent SDK."
"""M1.4: the prefix of a non-interactive session without Claude Code's appended preset — ours: every
session is an SDK-style agent with its own system prompt."""
CLI_PREFIXES: Final = frozenset({CLI_PREFIX, AGENT_SDK_CLAUDE_CODE_PRESET_PREFIX, AGENT_SDK_PREFIX})
BILLING_HEADER_PREFIX: Final = "x-anthropic-billing-header:"
"""M1.4 [REC]: Claude Code's attribution line; we never send it (one in a stored system is dropped)."""

DEFAULT_TEMPERATURE: Final = 1.0
"""M1.6: the temperature sent when thinking is off and none is configured."""
MAX_NON_STREAMING_TOKENS: Final = 64_000
"""M1.7: ``max_tokens`` cap of the non-streaming fallback request."""
NON_STREAMING_TIMEOUT_S: Final = 300.0
"""M5.2: per-attempt timeout of the non-streaming fallback (``API_TIMEOUT_MS`` default 300 000 ms)."""

_BUILT_KEYS: Final = frozenset(
    {
        "model",
        "messages",
        "system",
        "tools",
        "metadata",
        "max_tokens",
        "thinking",
        "temperature",
        "stream",
        "cache_control",
    }
)
"""Fields :func:`build_model_params` derives itself; the stored request's values for them are replaced
(``stream`` is passed by the caller; a top-level ``cache_control`` — automatic caching, M9.1 — would be
a breakpoint beyond the ones placed here)."""


class InvalidStoredRequest(AgentbusError):
    """The normalizer's stored request cannot be sent: ``field`` names the offending key."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class ModelDefaults:
    """The model worker's defaults, used where a session's :class:`SessionModelConfig` says nothing."""

    model: str
    fallback_model: str | None = None
    max_tokens: int | None = None
    """Override of the M1.5 default, bounded by the model's upper limit; ``None`` = the M1.5 default."""
    system_prompt: str | None = None
    """The rest block of ``system`` (after the prefix block, M1.4); ``None`` = no rest block."""
    thinking: JsonObject | None = None
    """M1.6: ``None`` = on (adaptive where the model supports it, else a budget of upper limit − 1);
    ``{"type": "disabled"}`` = off; ``{"type": "enabled", "budget_tokens": n}`` = that budget."""
    temperature: float | None = None
    """Sent only when thinking is off; ``None`` = 1 (M1.6)."""
    device_id: str = ""
    """M1.3: persistent per-install id in ``metadata.user_id``."""
    # Additions beyond the contract fields:
    system_prefix: str = AGENT_SDK_PREFIX
    """M1.4: the CLI prefix block."""
    prompt_caching: bool = True
    """M9.6: ``False`` = ``DISABLE_PROMPT_CACHING``."""
    cache_ttl: CacheTtl = "5m"
    """M9.5: ``"1h"`` adds ``"ttl": "1h"`` to every marker."""
    capped_default_max_tokens: bool = False
    """M1.5 gate ``tengu_otk_slot_v1``: default capped at 8 000, escalated once to 64 000 (M8.5)."""
    extra_metadata: Mapping[str, JsonValue] = field(default_factory=lambda: MappingProxyType({}))
    """M1.3 ``CLAUDE_CODE_EXTRA_METADATA``: keys put first into ``metadata.user_id``."""
    max_tokens_table: MaxTokensTable = DEFAULT_MAX_TOKENS_TABLE
    thinking_capabilities: ThinkingCapabilities = DEFAULT_THINKING_CAPABILITIES


def metadata_user_id(*, device_id: str, session_id: str, extra: Mapping[str, JsonValue] | None = None) -> str:
    """M1.3: the JSON string (compact, like ``JSON.stringify``) of the extra keys, then ``device_id``,
    ``account_uuid`` (``""``: API-key auth) and ``session_id``."""
    fields: dict[str, JsonValue] = dict(extra or {})
    fields.update(device_id=device_id, account_uuid="", session_id=session_id)
    return json.dumps(fields, separators=(",", ":"), ensure_ascii=False)


def _system_texts(system: JsonValue) -> list[str]:
    """The text of a stored ``system`` (a string or text blocks)."""
    if isinstance(system, str):
        return [system]
    if isinstance(system, list):
        return [text for block in system if isinstance(block, Mapping) and isinstance(text := block.get("text"), str)]
    return []


def system_blocks(prefix: str, texts: Sequence[str]) -> list[JsonObject]:
    """M1.4: the prefix block, then every other system text joined with ``"\\n\\n"`` into one block
    (omitted when empty). A stored prefix replaces ``prefix``; a billing line is dropped."""
    rest: list[str] = []
    for text in texts:
        if text in CLI_PREFIXES:
            prefix = text
        elif text and not text.startswith(BILLING_HEADER_PREFIX):
            rest.append(text)
    blocks: list[JsonObject] = [{"type": "text", "text": prefix}]
    joined = "\n\n".join(rest)
    if joined:
        blocks.append({"type": "text", "text": joined})
    return blocks


def offered_tools(tools: Sequence[ToolDefinition], allowed: Sequence[str] | None) -> list[JsonObject]:
    """M1.8: the catalog's tool definitions (unknown keys kept, catalog order) the session may use;
    ``allowed=None`` = all of them. Names in ``allowed`` no tool has are ignored (A3.4);
    :func:`unknown_tool_names` lists them."""
    names = None if allowed is None else set(allowed)
    return [tool_wire(tool) for tool in tools if names is None or tool.name in names]


def tool_wire(tool: ToolDefinition) -> JsonObject:
    """``tool.to_wire()`` without pydantic's serializer (10 µs a tool, every request): the fields in
    declaration order, ``description`` only when it was set, then the unknown keys. The values are the
    tool's own (JSON already), shared, not copied."""
    wire: JsonObject = {"name": tool.name}
    if "description" in tool.model_fields_set:
        wire["description"] = tool.description
    wire["input_schema"] = tool.input_schema
    if tool.model_extra:
        wire.update(tool.model_extra)
    return wire


def unknown_tool_names(tools: Sequence[ToolDefinition], allowed: Sequence[str] | None) -> list[str]:
    """A3.4: names of ``allowed`` that no catalog tool has (reported, then ignored)."""
    known = {tool.name for tool in tools}
    return [name for name in allowed or () if name not in known]


def _with_thinking_fields(
    params: JsonObject,
    model: str,
    requested: Mapping[str, JsonValue] | None,
    *,
    max_tokens: int,
    messages: list[JsonValue],
    temperature: float | None,
    capabilities: ThinkingCapabilities,
    table: MaxTokensTable,
) -> None:
    """M1.6 on a params dict being built (sending ``max_tokens`` and ``messages``): ``thinking`` or
    ``temperature``, fitted to the open turn of the messages (API §1.10)."""
    thinking = thinking_param(
        model,
        requested,
        max_tokens=max_tokens,
        upper_limit=max_tokens_upper_limit(model, table=table),
        capabilities=capabilities,
    )
    if thinking is not None and open_turn_blocks_thinking(messages):
        thinking = None
    params.pop("thinking", None)
    params.pop("temperature", None)
    if thinking is None:
        params["messages"] = strip_open_turn_thinking(messages)
        _temperature_fields(params, model, temperature, capabilities)
    else:
        params["thinking"] = thinking


def build_model_params(
    api_request: JsonObject,
    *,
    session_id: str,
    config: SessionModelConfig,
    defaults: ModelDefaults,
    tools: Sequence[ToolDefinition],
    thinking_models: Sequence[str] = (),
) -> JsonObject:
    """The keyword arguments of ``messages.create(**params, stream=True)`` for one turn (M1.1).

    * ``model``: the session's, else the stored request's, else the worker's.
    * ``messages``: the stored request's (M1.8), with the one message cache marker (M9.4).
    * ``system``: the prefix block + the rest block (M1.4), both cached (M9.4); the rest is the stored
      request's ``system``, else the session's ``system_prompt``, else the worker's.
    * ``tools``: the catalog filtered by ``config.tools`` (M1.8); omitted when empty.
    * ``metadata.user_id``: M1.3 with ``session_id``.
    * ``max_tokens``: the session's or the worker's override bounded by the upper limit, else the M1.5
      default.
    * ``thinking`` / ``temperature``: M1.6; a sub-agent (``config.agent_id`` set) runs without thinking
      (A3.6). Thinking is left out for a request continuing a tool loop whose assistant turn does not
      start with thinking, and the open turn's thinking is removed when thinking is off (API §1.10).
      ``thinking_models`` are the models whose thinking the open turn replays (the normalizer's
      ``open_turn_thinking_models``): when one is not ``model`` (a fallback switch, M6.3 step 4 / M6.6, or
      a session whose model changed mid-turn) the open turn's thinking is removed first — its signatures
      would fail on this model — and the tool loop goes on without thinking.

    Raises :class:`InvalidStoredRequest` when ``api_request["messages"]`` is not a list.
    """
    model = config.model or _str(api_request.get("model")) or defaults.model
    table = defaults.max_tokens_table
    override = config.max_tokens if config.max_tokens is not None else defaults.max_tokens
    stored_messages = api_request.get("messages")
    if not isinstance(stored_messages, list):
        kind = type(stored_messages).__name__
        raise InvalidStoredRequest(f"stored request: messages: expected a list, got {kind}", field="messages")
    messages: list[JsonValue] = list(stored_messages)
    if any(not same_model(signer, model) for signer in thinking_models):
        messages = strip_open_turn_thinking(messages)
    max_tokens = resolve_max_tokens(model, override, table=table, capped_default=defaults.capped_default_max_tokens)
    params: JsonObject = {
        "model": model,
        "messages": messages,
        "system": list(
            system_blocks(
                defaults.system_prefix,
                _system_texts(api_request["system"])
                if "system" in api_request
                else [(config.system_prompt if config.system_prompt is not None else defaults.system_prompt) or ""],
            )
        ),
        "metadata": {
            "user_id": metadata_user_id(
                device_id=defaults.device_id, session_id=session_id, extra=defaults.extra_metadata
            )
        },
        "max_tokens": max_tokens,
    }
    offered = offered_tools(tools, config.tools)
    if offered:
        params["tools"] = list(offered)
    requested = (
        DISABLED_THINKING
        if config.agent_id is not None
        else config.thinking
        if config.thinking is not None
        else defaults.thinking
    )
    _with_thinking_fields(
        params,
        model,
        requested,
        max_tokens=max_tokens,
        messages=messages,
        temperature=defaults.temperature,
        capabilities=defaults.thinking_capabilities,
        table=table,
    )
    for key, value in api_request.items():
        if key not in _BUILT_KEYS:
            params[key] = value
    return sdk_params(apply_cache_breakpoints(params, ttl=defaults.cache_ttl, enabled=defaults.prompt_caching))


def _str(value: JsonValue | None) -> str | None:
    return value if isinstance(value, str) and value else None


def _temperature_fields(
    body: JsonObject, model: str, temperature: float | None, capabilities: ThinkingCapabilities
) -> None:
    """M1.6 with thinking off: ``temperature`` = the override or 1, unless the model rejects the field."""
    body.pop("temperature", None)
    if capabilities.accepts_temperature(model):
        body["temperature"] = DEFAULT_TEMPERATURE if temperature is None else temperature


def _number(value: JsonValue | None) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def fallback_model(config: SessionModelConfig, defaults: ModelDefaults, *, model: str) -> str | None:
    """M6.1: the model to switch to after repeated 529s — the session's, else the worker's; ``None``
    when there is none or it is ``model`` itself (Claude Code refuses a fallback equal to the main
    model)."""
    fallback = config.fallback_model or defaults.fallback_model
    return fallback if fallback and fallback != model else None


def with_max_tokens(
    params: JsonObject, max_tokens: int, *, capabilities: ThinkingCapabilities = DEFAULT_THINKING_CAPABILITIES
) -> JsonObject:
    """A copy of ``params`` sending ``max_tokens`` (M4.11 retry override, M8.5 loop override); an
    ``enabled`` thinking budget is lowered to ``max_tokens − 1`` when it no longer fits, and thinking is
    dropped (temperature 1 sent) when no budget of at least 1 024 fits (M1.6)."""
    body = request_body(params)
    body["max_tokens"] = max_tokens
    thinking = body.get("thinking")
    budget = thinking_budget(thinking)
    if isinstance(thinking, dict) and budget is not None and budget >= max_tokens:
        if max_tokens - 1 >= MIN_THINKING_BUDGET:
            body["thinking"] = {**thinking, "budget_tokens": max_tokens - 1}
        else:
            del body["thinking"]
            _temperature_fields(body, _str(body.get("model")) or "", None, capabilities)
    return sdk_params(body, options_of(params))


def non_streaming_fallback_params(params: JsonObject, *, timeout_s: float = NON_STREAMING_TIMEOUT_S) -> JsonObject:
    """M1.7: the non-streaming fallback request (M5): ``max_tokens`` capped at 64 000, an ``enabled``
    thinking budget at most ``max_tokens − 1``; plus ``timeout`` (M5.2: 300 s per attempt), because the
    Python SDK refuses a non-streaming call that may take over 10 minutes without an explicit timeout
    (``max_tokens`` > 21 333). Replace ``timeout`` to use another one."""
    body = request_body(params)
    max_tokens = body.get("max_tokens")
    capped = min(max_tokens, MAX_NON_STREAMING_TOKENS) if isinstance(max_tokens, int) else MAX_NON_STREAMING_TOKENS
    body["max_tokens"] = capped
    thinking = body.get("thinking")
    budget = thinking_budget(thinking)
    if isinstance(thinking, dict) and budget is not None and budget > capped - 1:
        body["thinking"] = {**thinking, "budget_tokens": capped - 1}
    return sdk_params(body, {**options_of(params), "timeout": timeout_s})


def with_model(
    params: JsonObject,
    model: str,
    *,
    table: MaxTokensTable = DEFAULT_MAX_TOKENS_TABLE,
    capabilities: ThinkingCapabilities = DEFAULT_THINKING_CAPABILITIES,
    capped_default: bool = False,
) -> JsonObject:
    """The same request on ``model`` (M6 fallback switch), ``max_tokens`` and thinking re-derived:

    * ``max_tokens``: the old model's default becomes the new model's default; any other value (an
      override) is kept, bounded by the new model's upper limit (M1.5);
    * thinking stays on or off as it was (off when the request carried none) and is re-derived for
      the new model (M1.6); an ``enabled`` budget that was not the old model's default is kept;
    * thinking blocks are removed from the history: signatures are bound to the model that made them
      (M6.3 step 4, M6.6 [REC]), and with them gone a continued tool loop goes without thinking (API
      §1.10); the message cache marker is placed again (M9.4).

    ``table``/``capabilities``/``capped_default`` must be the ones the params were built with
    (:class:`ModelDefaults`)."""
    body = request_body(params)
    old_model = _str(body.get("model")) or model
    if old_model == model:
        return dict(params)
    old_max_tokens = body.get("max_tokens")
    if not isinstance(old_max_tokens, int) or old_max_tokens == default_max_tokens(
        old_model, table=table, capped_default=capped_default
    ):
        max_tokens = default_max_tokens(model, table=table, capped_default=capped_default)
    else:
        max_tokens = min(old_max_tokens, max_tokens_upper_limit(model, table=table))
    old_thinking = body.get("thinking")
    requested: JsonObject | None = DISABLED_THINKING
    if isinstance(old_thinking, dict):
        budget = thinking_budget(old_thinking)
        old_sent = old_max_tokens if isinstance(old_max_tokens, int) else max_tokens
        default_budget = min(old_sent - 1, max_tokens_upper_limit(old_model, table=table) - 1)
        requested = {"type": "enabled", "budget_tokens": budget} if budget not in (None, default_budget) else None
    body["model"] = model
    body["max_tokens"] = max_tokens
    old_messages = body.get("messages")
    messages = strip_thinking(old_messages) if isinstance(old_messages, list) else []
    body["messages"] = messages
    _with_thinking_fields(
        body,
        model,
        requested,
        max_tokens=max_tokens,
        messages=messages,
        temperature=_number(body.get("temperature")),
        capabilities=capabilities,
        table=table,
    )
    cached = apply_cache_breakpoints(body, ttl=_marker_ttl(body), enabled=_has_markers(body))
    return sdk_params(cached, options_of(params))


def _marker_ttl(body: JsonObject) -> CacheTtl:
    system = body.get("system")
    if isinstance(system, list):
        for block in system:
            marker = block.get("cache_control") if isinstance(block, dict) else None
            if isinstance(marker, dict) and marker.get("ttl") == "1h":
                return "1h"
    return "5m"


def _has_markers(body: JsonObject) -> bool:
    system = body.get("system")
    return isinstance(system, list) and any(isinstance(block, dict) and "cache_control" in block for block in system)


__all__ = [
    "AGENT_SDK_CLAUDE_CODE_PRESET_PREFIX",
    "AGENT_SDK_PREFIX",
    "CLI_PREFIX",
    "CREATE_KEYWORDS",
    "DEFAULT_TEMPERATURE",
    "MAX_NON_STREAMING_TOKENS",
    "NON_STREAMING_TIMEOUT_S",
    "SDK_OPTIONS",
    "InvalidStoredRequest",
    "ModelDefaults",
    "build_model_params",
    "fallback_model",
    "metadata_user_id",
    "non_streaming_fallback_params",
    "offered_tools",
    "request_body",
    "sdk_params",
    "system_blocks",
    "tool_wire",
    "unknown_tool_names",
    "with_max_tokens",
    "with_model",
]
