"""Claude Code's permission model for a headless bus (pure): may this tool call run?

:func:`check_permission` is Claude Code's pipeline (``hasPermissionsToUseToolInner`` + the tools'
own checks) and answers allow / deny / ask. :func:`decide` then applies what a headless bus must do
with an "ask" — there is no human to ask: ``dontAsk`` mode turns it into a deny with
:func:`~agentbus_redis.messages.constants.dont_ask_reject_message`, otherwise the context's ``ask_policy`` resolves it.

Order (first hit wins), each step citing the Claude Code step it mirrors:

1. a whole-tool deny rule → deny; 2. a whole-tool ask rule → ask;
3. the tool-specific check (Bash sub-commands, file paths, WebFetch domains) — its deny wins, its
   content ask rules and its safety checks (``.git/``, ``.claude/``, shell rc files … for edits)
   survive even ``bypassPermissions``;
4. ``bypassPermissions`` → allow; 5. a whole-tool allow rule → allow;
6. the tool-specific allow (an allow rule, a read inside the workspace, ``acceptEdits`` for an edit
   inside the workspace); 7. a read-only tool → allow; 8. otherwise ask.

``plan`` mode decides like ``default`` (Claude Code only bypasses in plan mode when bypass was
available at start-up; the "do not modify" contract of plan mode is a prompt, not a permission).
The rule syntax is documented in :mod:`agentbus_redis.permissions.rules`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from agentbus_redis.json_types import JsonValue
from agentbus_redis.messages.constants import (
    REJECT_MESSAGE,
    SUBAGENT_REJECT_MESSAGE,
    auto_reject_message,
    dont_ask_reject_message,
)
from agentbus_redis.permissions.checks import check_bash, check_path, check_web_fetch, path_inputs
from agentbus_redis.permissions.path_glob import normalize_posix
from agentbus_redis.permissions.rules import (
    BASH_TOOL,
    EDIT_RULE_TOOLS,
    READ_RULE_TOOLS,
    WEB_FETCH_TOOL,
    PermissionRule,
    canonical_tool_name,
    parse_rule,
    parse_rules,
    rule_matches_whole_tool,
)
from agentbus_redis.permissions.types import PermissionDecision, ToolCheck

__all__ = [
    "AskPolicy",
    "PermissionContext",
    "PermissionDecision",
    "PermissionMode",
    "PermissionRule",
    "check_permission",
    "decide",
    "parse_rule",
    "parse_rules",
]

PermissionMode = Literal["default", "acceptEdits", "bypassPermissions", "plan", "dontAsk"]
AskPolicy = Literal["reject", "auto_reject", "ask_message", "allow", "passthrough", "approve"]
"""What a headless bus does with "ask": ``reject`` → deny with REJECT_MESSAGE (SUBAGENT_REJECT_MESSAGE
for sub-agents), as if the user had said no; ``auto_reject`` → deny with AUTO_REJECT_MESSAGE(tool)
(Claude Code's behaviour for background agents that cannot prompt); ``ask_message`` → deny with the
approval request text itself (what ``claude -p`` writes); ``allow`` → allow; ``passthrough`` → leave
it as "ask" for a caller that can relay the question; ``approve`` → leave it as "ask": the tool worker
asks a person on the bus (agent-loop.md §H, approvals/records.py)."""

READ_ONLY_TOOLS = frozenset({*READ_RULE_TOOLS, "WebSearch", "TodoRead"})
"""Tools treated as read-only when the caller does not say (file reads still need their path
to be inside the workspace or allowed by a rule)."""


@dataclass(frozen=True, slots=True)
class PermissionContext:
    """Everything a decision depends on: mode, rules, where the workspace is, who is asking."""

    workspace_root: str
    mode: PermissionMode = "default"
    allow_rules: tuple[PermissionRule, ...] = ()
    deny_rules: tuple[PermissionRule, ...] = ()
    ask_rules: tuple[PermissionRule, ...] = ()
    home_dir: str | None = None
    is_subagent: bool = False
    ask_policy: AskPolicy = "reject"
    protect_sensitive_paths: bool = True
    """Edits of ``.git/``, ``.claude/``, ``.vscode/``, ``.idea/`` and shell/git rc files always ask."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "workspace_root", normalize_posix(self.workspace_root))

    @classmethod
    def from_settings(
        cls,
        *,
        workspace_root: str,
        allow: Sequence[str] = (),
        deny: Sequence[str] = (),
        ask: Sequence[str] = (),
        mode: PermissionMode = "default",
        home_dir: str | None = None,
        is_subagent: bool = False,
        ask_policy: AskPolicy = "reject",
        protect_sensitive_paths: bool = True,
    ) -> PermissionContext:
        """Build a context from rule strings (raises ``InvalidPermissionRule`` with the index)."""
        return cls(
            workspace_root=workspace_root,
            mode=mode,
            allow_rules=parse_rules(tuple(allow), "allow"),
            deny_rules=parse_rules(tuple(deny), "deny"),
            ask_rules=parse_rules(tuple(ask), "ask"),
            home_dir=home_dir,
            is_subagent=is_subagent,
            ask_policy=ask_policy,
            protect_sensitive_paths=protect_sensitive_paths,
        )


def _first_whole_tool_rule(rules: Sequence[PermissionRule], tool_name: str) -> PermissionRule | None:
    return next((rule for rule in rules if rule_matches_whole_tool(rule, tool_name)), None)


def _tool_check(
    tool_name: str, tool_input: JsonValue, context: PermissionContext, extra_paths: Sequence[str]
) -> ToolCheck:
    """Step 3: the tool-specific part of the pipeline."""
    rules = (context.deny_rules, context.ask_rules, context.allow_rules)
    inputs = tool_input if isinstance(tool_input, dict) else {}
    if tool_name == BASH_TOOL:
        command = inputs.get("command")
        return check_bash(command if isinstance(command, str) else "", *rules, workspace_root=context.workspace_root)
    if tool_name in READ_RULE_TOOLS or tool_name in EDIT_RULE_TOOLS:
        paths = [*path_inputs(tool_name, inputs, context.workspace_root, context.home_dir), *extra_paths]
        return check_path(
            tool_name,
            [normalize_posix(path) for path in paths],
            *rules,
            workspace_root=context.workspace_root,
            home_dir=context.home_dir,
            accept_edits=context.mode == "acceptEdits",
            protect_sensitive=context.protect_sensitive_paths,
        )
    if tool_name == WEB_FETCH_TOOL:
        url = inputs.get("url")
        return check_web_fetch(url if isinstance(url, str) else "", *rules)
    return ToolCheck("passthrough")


def _request_message(tool_name: str) -> str:
    return f"Claude requested permissions to use {tool_name}, but you haven't granted it yet."


def check_permission(
    tool_name: str,
    tool_input: JsonValue,
    context: PermissionContext,
    *,
    read_only: bool | None = None,
    extra_paths: Sequence[str] = (),
) -> PermissionDecision:
    """Claude Code's allow / deny / ask answer for one call (no headless resolution).

    ``read_only`` is the tool's own ``is_read_only(input)`` (default: :data:`READ_ONLY_TOOLS`);
    ``extra_paths`` are further absolute paths the call touches (e.g. a symlink's resolved target) —
    deny and ask rules apply to every path, allowing needs every path allowed."""
    tool_name = canonical_tool_name(tool_name)
    deny_rule = _first_whole_tool_rule(context.deny_rules, tool_name)
    if deny_rule is not None:
        return PermissionDecision("deny", "rule", f"Permission to use {tool_name} has been denied.", deny_rule)
    ask_rule = _first_whole_tool_rule(context.ask_rules, tool_name)
    if ask_rule is not None:
        return PermissionDecision("ask", "rule", _request_message(tool_name), ask_rule)
    check = _tool_check(tool_name, tool_input, context, extra_paths)
    if check.behavior == "deny" or (check.behavior == "ask" and check.reason in ("rule", "safety_check")):
        return check.as_decision()
    if context.mode == "bypassPermissions":
        return PermissionDecision("allow", "mode")
    allow_rule = _first_whole_tool_rule(context.allow_rules, tool_name)
    if allow_rule is not None:
        return PermissionDecision("allow", "rule", rule=allow_rule)
    if check.behavior in ("allow", "ask"):
        return check.as_decision()
    is_read_only = read_only if read_only is not None else tool_name in READ_ONLY_TOOLS
    if is_read_only and tool_name not in READ_RULE_TOOLS:
        return PermissionDecision("allow", "read_only")
    return PermissionDecision("ask", "requires_approval", check.message or _request_message(tool_name))


def _resolve_ask(decision: PermissionDecision, tool_name: str, context: PermissionContext) -> PermissionDecision:
    """What a headless bus does with an "ask" (see :data:`AskPolicy`)."""
    if context.mode == "dontAsk":
        return decision.resolved("deny", "mode", dont_ask_reject_message(tool_name))
    policy = context.ask_policy
    if policy in ("passthrough", "approve"):
        return decision
    if policy == "allow":
        return decision.resolved("allow", "ask_policy", None)
    if policy == "auto_reject":
        return decision.resolved("deny", "ask_policy", auto_reject_message(tool_name))
    if policy == "ask_message":
        return decision.resolved("deny", "ask_policy", decision.message or _request_message(tool_name))
    message = SUBAGENT_REJECT_MESSAGE if context.is_subagent else REJECT_MESSAGE
    return decision.resolved("deny", "ask_policy", message)


def decide(
    tool_name: str,
    tool_input: JsonValue,
    context: PermissionContext,
    *,
    read_only: bool | None = None,
    extra_paths: Sequence[str] = (),
) -> PermissionDecision:
    """The bus's decision: :func:`check_permission`, then "ask" resolved for a headless run
    (``dontAsk`` → deny with DONT_ASK_REJECT_MESSAGE(tool); else the ``ask_policy``)."""
    decision = check_permission(tool_name, tool_input, context, read_only=read_only, extra_paths=extra_paths)
    if decision.behavior != "ask":
        return decision
    return _resolve_ask(decision, canonical_tool_name(tool_name), context)
