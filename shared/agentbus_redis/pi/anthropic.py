"""P6: pi's own conversion of LLM messages to the Anthropic Messages API (``convertMessages``).

Faithful to pi, including what it does not guard against (P6.11): orphan or duplicate results and
consecutive same-role messages are sent as they are. agentbus' own request for a pi session is built by
:mod:`agentbus_redis.pi.request` instead, which never produces a request the API rejects.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

from agentbus_redis.pi.constants import SEE_ATTACHED_IMAGE
from agentbus_redis.pi.content import PiBlock, PiImage, PiText, PiThinking, PiToolCall
from agentbus_redis.pi.messages import PiAssistantMessage, PiLlmMessage, PiToolResultMessage, PiUserMessage
from agentbus_redis.pi.transform import PiTargetModel, normalize_anthropic_tool_call_id, transform_messages

ApiObject = dict[str, Any]
CacheRetention = Literal["none", "short", "long"]

CLAUDE_CODE_TOOL_NAMES = (
    "Read", "Write", "Edit", "Bash", "Grep", "Glob", "AskUserQuestion", "EnterPlanMode", "ExitPlanMode",
    "KillShell", "NotebookEdit", "Skill", "Task", "TaskOutput", "TodoWrite", "WebFetch", "WebSearch",
)  # fmt: skip
"""P6.9: with an OAuth token, tool names equal to one of these (ignoring case) are sent in this casing."""
_OAUTH_NAME = {name.lower(): name for name in CLAUDE_CODE_TOOL_NAMES}

_UNPAIRED_SURROGATE = re.compile(r"[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]")


def sanitize_surrogates(text: str) -> str:
    """P2.6: remove unpaired UTF-16 surrogates (a Python ``str`` from JSON may hold ``"\\ud83d"``)."""
    return _UNPAIRED_SURROGATE.sub("", text)


def _image(block: PiImage) -> ApiObject:
    return {"type": "image", "source": {"type": "base64", "media_type": block.mime_type, "data": block.data}}


def _user(message: PiUserMessage, images_supported: bool) -> ApiObject | None:
    """P6.2."""
    if isinstance(message.content, str):
        return {"role": "user", "content": sanitize_surrogates(message.content)} if message.content.strip() else None
    blocks: list[ApiObject] = []
    for block in message.content:
        if isinstance(block, PiText) and block.text.strip():
            blocks.append({"type": "text", "text": sanitize_surrogates(block.text)})
        elif isinstance(block, PiImage) and images_supported:
            blocks.append(_image(block))
    return {"role": "user", "content": blocks} if blocks else None


def _assistant(message: PiAssistantMessage, oauth: bool) -> ApiObject | None:
    """P6.3."""
    blocks: list[ApiObject] = []
    for block in message.content:
        if isinstance(block, PiText):
            if block.text.strip():
                blocks.append({"type": "text", "text": sanitize_surrogates(block.text)})
        elif isinstance(block, PiThinking):
            if block.redacted:
                blocks.append({"type": "redacted_thinking", "data": block.thinking_signature or ""})
            elif not block.thinking.strip():
                continue
            elif not (block.thinking_signature or "").strip():
                blocks.append({"type": "text", "text": sanitize_surrogates(block.thinking)})
            else:
                thinking = sanitize_surrogates(block.thinking)
                blocks.append({"type": "thinking", "thinking": thinking, "signature": block.thinking_signature})
        elif isinstance(block, PiToolCall):
            name = _OAUTH_NAME.get(block.name.lower(), block.name) if oauth else block.name
            arguments = block.arguments if block.arguments is not None else {}
            blocks.append({"type": "tool_use", "id": block.id, "name": name, "input": arguments})
    return {"role": "assistant", "content": blocks} if blocks else None


def tool_result_content(content: str | list[PiBlock]) -> str | list[ApiObject]:
    """P6.5: texts joined by ``\\n``; with images, blocks (an image-only result gets a text first)."""
    blocks = [PiText(text=content)] if isinstance(content, str) else content
    if not any(isinstance(block, PiImage) for block in blocks):
        return sanitize_surrogates("\n".join(block.text for block in blocks if isinstance(block, PiText)))
    converted: list[ApiObject] = []
    for block in blocks:
        if isinstance(block, PiText):
            converted.append({"type": "text", "text": sanitize_surrogates(block.text)})
        elif isinstance(block, PiImage):
            converted.append(_image(block))
    if not any(block["type"] == "text" for block in converted):
        converted.insert(0, {"type": "text", "text": SEE_ATTACHED_IMAGE})
    return converted


def _tool_result(message: PiToolResultMessage) -> ApiObject:
    """P6.4: ``is_error`` always present; ``toolName`` and ``details`` are not sent."""
    return {
        "type": "tool_result",
        "tool_use_id": message.tool_call_id,
        "content": tool_result_content(message.content),
        "is_error": bool(message.is_error),
    }


def cache_control(retention: CacheRetention, base_url: str) -> ApiObject | None:
    """P6.7."""
    if retention == "none":
        return None
    if retention == "long" and "api.anthropic.com" in base_url:
        return {"type": "ephemeral", "ttl": "1h"}
    return {"type": "ephemeral"}


def _mark_last_user_block(messages: list[ApiObject], control: ApiObject) -> None:
    """P6.7: the last block of the last message, if that message is a user one."""
    if not messages or messages[-1]["role"] != "user":
        return
    last = messages[-1]
    if isinstance(last["content"], str):
        last["content"] = [{"type": "text", "text": last["content"]}]
    if last["content"] and last["content"][-1]["type"] in {"text", "image", "tool_result"}:
        last["content"][-1] = {**last["content"][-1], "cache_control": control}


def convert_messages(
    messages: Sequence[PiLlmMessage],
    model: PiTargetModel,
    *,
    images_supported: bool = True,
    oauth: bool = False,
    cache_retention: CacheRetention = "short",
    base_url: str = "https://api.anthropic.com",
    now_ms: int = 0,
) -> list[ApiObject]:
    """P6.1: ``transformMessages`` with the Anthropic id normaliser, then message by message; consecutive
    tool results become one user message (P6.4)."""
    converted: list[ApiObject] = []
    transformed = transform_messages(messages, model, normalize_anthropic_tool_call_id, now_ms=now_ms)
    index = 0
    while index < len(transformed):
        message = transformed[index]
        if isinstance(message, PiToolResultMessage):
            results: list[ApiObject] = []
            while index < len(transformed) and isinstance(transformed[index], PiToolResultMessage):
                result = transformed[index]
                assert isinstance(result, PiToolResultMessage)
                results.append(_tool_result(result))
                index += 1
            converted.append({"role": "user", "content": results})
            continue
        api_message = (
            _user(message, images_supported) if isinstance(message, PiUserMessage) else _assistant(message, oauth)
        )
        if api_message is not None:
            converted.append(api_message)
        index += 1
    control = cache_control(cache_retention, base_url)
    if control is not None:
        _mark_last_user_block(converted, control)
    return converted
