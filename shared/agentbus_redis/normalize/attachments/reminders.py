"""``normalizeAttachmentForAPI`` texts of the simple reminder kinds (beyond the kinds R4.9 lists;
exact Claude Code v2.1.88 texts, ungated ones only). Each builder returns the contents of the meta
user messages to produce, each later wrapped in ``<system-reminder>``; ``[]`` produces nothing.

Not here (reported as unconverted): kinds whose text depends on remote gates or runtime state
(``plan_mode``, ``task_reminder``, ``task_status``, ``output_style``, ``diagnostics``, ``mcp_resource``…).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from agentbus_redis.json_types import JsonObject, JsonValue

_MISSING = object()


def js_string(value: object) -> str:
    """How a JavaScript template literal renders a JSON value (``undefined`` when absent)."""
    if value is _MISSING:
        return "undefined"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, list):
        return ",".join("" if item is None else js_string(item) for item in value)
    if isinstance(value, dict):
        return "[object Object]"
    return str(value)


def field(data: JsonObject, key: str) -> str:
    """``${attachment.key}``."""
    return js_string(data.get(key, _MISSING))


def _strings(value: JsonValue) -> list[str]:
    return [js_string(item) for item in value] if isinstance(value, list) else []


def _objects(value: JsonValue) -> list[JsonObject]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _todo_reminder(data: JsonObject) -> list[str]:
    items = "\n".join(
        f"{index + 1}. [{field(todo, 'status')}] {field(todo, 'content')}"
        for index, todo in enumerate(_objects(data.get("content")))
    )
    message = (
        "The TodoWrite tool hasn't been used recently. If you're working on tasks that would benefit from tracking "
        "progress, consider using the TodoWrite tool to track progress. Also consider cleaning up the todo list if "
        "has become stale and no longer matches what you are working on. Only use it if it's relevant to the current "
        "work. This is just a gentle reminder - ignore if not applicable. Make sure that you NEVER mention this "
        "reminder to the user\n"
    )
    if items:
        message += f"\n\nHere are the existing contents of your todo list:\n\n[{items}]"
    return [message]


def _invoked_skills(data: JsonObject) -> list[str]:
    skills = _objects(data.get("skills"))
    if not skills:
        return []
    rendered = "\n\n---\n\n".join(
        f"### Skill: {field(s, 'name')}\nPath: {field(s, 'path')}\n\n{field(s, 'content')}" for s in skills
    )
    return [f"The following skills were invoked in this session. Continue to follow these guidelines:\n\n{rendered}"]


def _nested_memory(data: JsonObject) -> list[str]:
    content = data.get("content")
    memory: JsonObject = content if isinstance(content, dict) else {}
    return [f"Contents of {field(memory, 'path')}:\n\n{field(memory, 'content')}"]


def _skill_listing(data: JsonObject) -> list[str]:
    if not data.get("content"):
        return []
    return [f"The following skills are available for use with the Skill tool:\n\n{field(data, 'content')}"]


def _plan_mode_exit(data: JsonObject) -> list[str]:
    reference = (
        f" The plan file is located at {field(data, 'planFilePath')} if you need to reference it."
        if data.get("planExists")
        else ""
    )
    return [
        "## Exited Plan Mode\n\nYou have exited plan mode. You can now make edits, run tools, and take actions."
        + reference
    ]


_AUTO_MODE_FULL = (
    "## Auto Mode Active\n\nAuto mode is active. The user chose continuous, autonomous execution. You should:\n\n"
    "1. **Execute immediately** — Start implementing right away. Make reasonable assumptions and proceed on "
    "low-risk work.\n"
    "2. **Minimize interruptions** — Prefer making reasonable assumptions over asking questions for routine "
    "decisions.\n"
    "3. **Prefer action over planning** — Do not enter plan mode unless the user explicitly asks. When in doubt, "
    "start coding.\n"
    "4. **Expect course corrections** — The user may provide suggestions or course corrections at any point; treat "
    "those as normal input.\n"
    "5. **Do not take overly destructive actions** — Auto mode is not a license to destroy. Anything that deletes "
    "data or modifies shared or production systems still needs explicit user confirmation. If you reach such a "
    "decision point, ask and wait, or course correct to a safer method instead.\n"
    "6. **Avoid data exfiltration** — Post even routine messages to chat platforms or work tickets only if the user "
    "has directed you to. You must not share secrets (e.g. credentials, internal documentation) unless the user has "
    "explicitly authorized both that specific secret and its destination."
)
_AUTO_MODE_SPARSE = (
    "Auto mode still active (see full instructions earlier in conversation). Execute autonomously, minimize "
    "interruptions, prefer action over planning."
)


def _deferred_tools_delta(data: JsonObject) -> list[str]:
    parts: list[str] = []
    if added := _strings(data.get("addedLines")):
        parts.append("The following deferred tools are now available via ToolSearch:\n" + "\n".join(added))
    if removed := _strings(data.get("removedNames")):
        parts.append(
            "The following deferred tools are no longer available (their MCP server disconnected). Do not search for "
            "them — ToolSearch will return no match:\n" + "\n".join(removed)
        )
    return ["\n\n".join(parts)]


def _agent_listing_delta(data: JsonObject) -> list[str]:
    parts: list[str] = []
    if added := _strings(data.get("addedLines")):
        header = (
            "Available agent types for the Agent tool:"
            if data.get("isInitial")
            else "New agent types are now available for the Agent tool:"
        )
        parts.append(header + "\n" + "\n".join(added))
    if removed := _strings(data.get("removedTypes")):
        parts.append("The following agent types are no longer available:\n" + "\n".join(f"- {t}" for t in removed))
    if data.get("isInitial") and data.get("showConcurrencyNote"):
        parts.append(
            "Launch multiple agents concurrently whenever possible, to maximize performance; to do that, use a "
            "single message with multiple tool uses."
        )
    return ["\n\n".join(parts)]


def _mcp_instructions_delta(data: JsonObject) -> list[str]:
    parts: list[str] = []
    if added := _strings(data.get("addedBlocks")):
        parts.append(
            "# MCP Server Instructions\n\nThe following MCP servers have provided instructions for how to use their "
            "tools and resources:\n\n" + "\n\n".join(added)
        )
    if removed := _strings(data.get("removedNames")):
        parts.append(
            "The following MCP servers have disconnected. Their instructions above no longer apply:\n"
            + "\n".join(removed)
        )
    return ["\n\n".join(parts)]


def _selected_lines(data: JsonObject) -> list[str]:
    content = field(data, "content")
    if len(content) > 2000:
        content = content[:2000] + "\n... (truncated)"
    return [
        f"The user selected the lines {field(data, 'lineStart')} to {field(data, 'lineEnd')} from "
        f"{field(data, 'filename')}:\n{content}\n\nThis may or may not be related to the current task."
    ]


def _async_hook_response(data: JsonObject) -> list[str]:
    response = data.get("response")
    fields: JsonObject = response if isinstance(response, dict) else {}
    produced = [field(fields, "systemMessage")] if fields.get("systemMessage") else []
    specific = fields.get("hookSpecificOutput")
    if isinstance(specific, dict) and specific.get("additionalContext"):
        produced.append(field(specific, "additionalContext"))
    return produced


REMINDER_BUILDERS: Mapping[str, Callable[[JsonObject], list[str]]] = {
    "compact_file_reference": lambda d: [
        f"Note: {field(d, 'filename')} was read before the last conversation was summarized, but the contents are "
        "too large to include. Use Read tool if you need to access it."
    ],
    "selected_lines_in_ide": _selected_lines,
    "opened_file_in_ide": lambda d: [
        f"The user opened the file {field(d, 'filename')} in the IDE. This may or may not be related to the "
        "current task."
    ],
    "plan_file_reference": lambda d: [
        f"A plan file exists from plan mode at: {field(d, 'planFilePath')}\n\nPlan contents:\n\n"
        f"{field(d, 'planContent')}\n\nIf this plan is relevant to the current work and not already complete, "
        "continue working on it."
    ],
    "invoked_skills": _invoked_skills,
    "todo_reminder": _todo_reminder,
    "nested_memory": _nested_memory,
    "skill_listing": _skill_listing,
    "plan_mode_exit": _plan_mode_exit,
    "auto_mode": lambda d: [_AUTO_MODE_SPARSE if d.get("reminderType") == "sparse" else _AUTO_MODE_FULL],
    "auto_mode_exit": lambda _d: [
        "## Exited Auto Mode\n\nYou have exited auto mode. The user may now want to interact more directly. You "
        "should ask clarifying questions when the approach is ambiguous rather than making assumptions."
    ],
    "critical_system_reminder": lambda d: [field(d, "content")],
    "agent_mention": lambda d: [
        f'The user has expressed a desire to invoke the agent "{field(d, "agentType")}". Please invoke the agent '
        "appropriately, passing in the required context to it. "
    ],
    "async_hook_response": _async_hook_response,
    "token_usage": lambda d: [
        f"Token usage: {field(d, 'used')}/{field(d, 'total')}; {field(d, 'remaining')} remaining"
    ],
    "budget_usd": lambda d: [
        f"USD budget: ${field(d, 'used')}/${field(d, 'total')}; ${field(d, 'remaining')} remaining"
    ],
    "compaction_reminder": lambda _d: [
        "Auto-compact is enabled. When the context window is nearly full, older messages will be automatically "
        "summarized so you can continue working seamlessly. There is no need to stop or rush — you have "
        "unlimited context through automatic compaction."
    ],
    "date_change": lambda d: [
        f"The date has changed. Today's date is now {field(d, 'newDate')}. DO NOT mention this to the user "
        "explicitly because they are already aware."
    ],
    "ultrathink_effort": lambda d: [
        f"The user has requested reasoning effort level: {field(d, 'level')}. Apply this to the current turn."
    ],
    "deferred_tools_delta": _deferred_tools_delta,
    "agent_listing_delta": _agent_listing_delta,
    "mcp_instructions_delta": _mcp_instructions_delta,
}
"""Attachment kind → the meta user message contents it produces (each wrapped in a system reminder)."""
