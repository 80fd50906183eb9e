"""Human approval of tool calls on the bus (agent-loop.md §H): the records, the texts, the rules (pure).

With ``AGENTBUS_TOOLS__ASK_POLICY=approve`` an "ask" decision (H2) becomes an :class:`ApprovalRequest`
(the fields of H4.2) instead of a deny. The waiting call holds no tool slot (P3 "tool job parked"):

1. a tool worker parks the job's asking calls — and, per R8.5, every call of a *later* batch, which must
   not run before them (the "tail") — in an :class:`ApprovalRequested` internal event on the session's
   ingress, stores the request for people to see, and acks the job;
2. a person answers with an :class:`ApprovalAnswer` on the session's ingress (CLI or SDK, H4.3);
   ingestion checks it against the parked approval (its id, session and tool_use_id) and emits one
   :class:`ApprovalContinuation` job for the call (allowed / denied / timed out / cancelled);
3. once every asking call of a park has its result, ingestion emits the tail as a continuation job of its
   own, which a tool worker runs like any job (it may park again).

Ingestion's ledger is the one place that decides (its batches are atomic and run by one owner per
shard), so every answer, deadline (H: an approval that outlives it is denied with
:func:`approval_timeout_text`) and interrupt (H6: pending approvals are cancelled) resolves an approval
exactly once. This module holds the wire models, the model-visible texts (H5, H6.3), the permission
suggestions (H4.2, H7.3) and the session rule updates (H7.1).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace
from typing import Literal

from pydantic import Field

from agentbus_redis.errors import InvalidPermissionRule
from agentbus_redis.json_types import JsonObject, JsonValue
from agentbus_redis.messages.constants import (
    REJECT_MESSAGE,
    REJECT_MESSAGE_WITH_REASON_PREFIX,
    SUBAGENT_REJECT_MESSAGE,
    SUBAGENT_REJECT_MESSAGE_WITH_REASON_PREFIX,
)
from agentbus_redis.messages.content import ToolUseBlock
from agentbus_redis.permissions.decide import PermissionContext, PermissionMode, parse_rules
from agentbus_redis.permissions.rules import BASH_TOOL, EDIT_RULE_TOOLS, READ_RULE_TOOLS, WEB_FETCH_TOOL, url_host
from agentbus_redis.permissions.types import PermissionDecision
from agentbus_redis.wire import WireHolder, WireModel

APPROVAL_SCHEMA_VERSION = 1

ApprovalOutcome = Literal["allowed", "denied", "timed_out", "cancelled"]
"""How an approval ended: a person allowed or denied it, its deadline passed, or an interrupt cancelled it."""
APPROVAL_OUTCOMES: tuple[ApprovalOutcome, ...] = ("allowed", "denied", "timed_out", "cancelled")

# --- texts the model sees (H5, H6) ----------------------------------------------------------------


def rejection_text(feedback: str | None = None, *, is_subagent: bool = False) -> str:
    """H6.3: "Reject" = REJECT_MESSAGE, "Reject with comment" = REJECT_MESSAGE_WITH_REASON_PREFIX + comment;
    the SUBAGENT_* variants when a sub-agent asked (H5.1). The answer carries the text verbatim (H4.4)."""
    if feedback is None or not feedback.strip():
        return SUBAGENT_REJECT_MESSAGE if is_subagent else REJECT_MESSAGE
    prefix = SUBAGENT_REJECT_MESSAGE_WITH_REASON_PREFIX if is_subagent else REJECT_MESSAGE_WITH_REASON_PREFIX
    return prefix + feedback


def approval_timeout_text(seconds: float) -> str:
    """The text of an approval nobody answered before its deadline.

    agent-loop.md names no timeout text of its own: a prompt that gets no answer is H4.4's failed prompt
    channel, whose text is ``Tool permission request failed: <Error: text>`` (H5.1 row "prompt channel
    failed"); the error part (JavaScript's ``String(error)`` form) is agentbus'."""
    return f"Tool permission request failed: Error: no answer within {seconds:g}s"


# --- ids ------------------------------------------------------------------------------------------


def _digest(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]


def approval_id_for(session_id: str, tool_use_id: str) -> str:
    """A call is asked about once: its approval id is derived from it, so a re-run job parks it again
    under the same id (idempotent)."""
    return f"apr_{_digest(session_id, tool_use_id)}"


def park_id_for(session_id: str, first_asked_tool_use_id: str) -> str:
    return f"park_{_digest(session_id, first_asked_tool_use_id)}"


# --- the wire records -----------------------------------------------------------------------------


class ApprovalRequest(WireModel):
    """H4.2 ``can_use_tool``: what a person is asked, with the session and agent asking (bus snake_case)."""

    approval_id: str
    session_id: str
    agent_id: str | None = None
    """None for the session's main thread; a sub-agent's id (H8.1)."""
    parent_session_id: str | None = None
    """A sub-agent's child session: the session whose Agent call started it (where its person answers)."""
    tool_name: str
    input: JsonValue
    tool_use_id: str
    permission_suggestions: list[JsonObject] = Field(default_factory=list)
    blocked_path: str | None = None
    decision_reason: str | None = None
    """H4.2: only for safety-check / working-directory / "other" reasons, absent for rule and mode reasons."""
    request_message: str
    """H2.5: the request text shown to the person (never to the model)."""
    assistant_uuid: str
    requested_ms: int
    deadline_ms: int


class ApprovalDecision(WireModel):
    """How an approval was resolved; what the continuation job does with its call."""

    outcome: ApprovalOutcome
    updated_input: JsonObject | None = None
    """allow: the input to run with (None or ``{}``: the original, H4.3)."""
    updated_permissions: list[JsonObject] = Field(default_factory=list)
    """allow: H1.4 updates to apply to the session before the tool runs (H4.4, H7)."""
    message: str | None = None
    """deny / timed_out / cancelled: the tool_result text, verbatim (H4.4). allow: feedback (H5.3)."""
    interrupt: bool = False
    decided_ms: int
    answered_by: str | None = None


class AskedCall(WireModel):
    """One call of a park that waits for a person."""

    approval_id: str
    tool_use: ToolUseBlock
    deadline_ms: int
    timeout_s: float
    agent_id: str | None = None


class ApprovalRequested(WireModel):
    """Internal (tool workers only, signed): these calls of a job are parked — ``asked`` wait for a person,
    ``tail`` (the calls of later R8.5 batches) wait for ``asked`` to have their results."""

    type: Literal["approval_requested"] = "approval_requested"
    park_id: str
    assistant_uuid: str
    message_id: str | None = None
    dispatched_ms: int
    asked: list[AskedCall] = Field(min_length=1)
    tail: list[ToolUseBlock] = Field(default_factory=list)


class ApprovalAnswer(WireModel):
    """A person's answer (H4.3), from a producer (CLI, SDK). ``message`` is the tool_result text of a deny,
    verbatim (H4.4; the CLI and SDK build it with :func:`rejection_text`), or the feedback of an allow
    (H5.3). ``interrupt`` on a deny aborts the turn (H6.2)."""

    type: Literal["approval_answer"] = "approval_answer"
    approval_id: str = Field(min_length=1)
    tool_use_id: str = Field(min_length=1)
    behavior: Literal["allow", "deny"]
    updated_input: JsonObject | None = None
    updated_permissions: list[JsonObject] = Field(default_factory=list)
    message: str | None = None
    interrupt: bool = False
    answered_by: str | None = None


class ApprovalContinuation(WireModel):
    """A job on the session's tool-jobs stream, written and signed by ingestion: run (or answer) parked
    calls. ``approval_id`` set: the one asked call with its ``decision``; None: a park's tail."""

    type: Literal["approval_continuation"] = "approval_continuation"
    v: int = APPROVAL_SCHEMA_VERSION
    session_id: str
    park_id: str
    assistant_uuid: str
    message_id: str | None = None
    tool_uses: list[ToolUseBlock]
    dispatched_ms: int
    deadline_ms: int
    traceparent: str | None = None
    approval_id: str | None = None
    agent_id: str | None = None
    decision: ApprovalDecision | None = None

    _always_dumped = frozenset({"type", "v"})


def parse_approval_request(data: str | bytes) -> ApprovalRequest:
    return ApprovalRequest.model_validate_json(data)


def parse_approval_decision(data: str | bytes) -> ApprovalDecision:
    return ApprovalDecision.model_validate_json(data)


# --- permission suggestions (H4.2, H7.3) ------------------------------------------------------------


def rule_text(tool_name: str, content: str | None = None) -> str:
    """H1.3 string form of ``{toolName, ruleContent}``: parentheses and backslashes in the content escaped."""
    if content is None:
        return tool_name
    escaped = content.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
    return f"{tool_name}({escaped})"


def _add_allow_rule(tool_name: str, content: str | None, destination: str) -> JsonObject:
    rule: JsonObject = {"toolName": tool_name}
    if content is not None:
        rule["ruleContent"] = content
    return {"type": "addRules", "rules": [rule], "behavior": "allow", "destination": destination}


def permission_suggestions(
    tool_name: str, tool_input: JsonValue, decision: PermissionDecision, *, blocked_path: str | None
) -> list[JsonObject]:
    """What "always allow" would add (H7.3): a Bash command → ``Bash(<command>)`` (localSettings); a file
    edit inside the workspace → ``setMode acceptEdits`` for the session; a path outside it → a path rule
    (session; agentbus has no additional working directories); WebFetch → its domain; any other tool → the
    whole tool. None when an allow rule would not change the decision: an ask rule or a safety check
    decides before allow rules (H2.2 steps 3, 7, 8)."""
    if decision.reason in ("rule", "safety_check"):
        return []
    inputs = tool_input if isinstance(tool_input, dict) else {}
    if tool_name == BASH_TOOL:
        command = inputs.get("command")
        return [_add_allow_rule(BASH_TOOL, command.strip(), "localSettings")] if isinstance(command, str) else []
    if tool_name in EDIT_RULE_TOOLS or tool_name in READ_RULE_TOOLS:
        family = "Edit" if tool_name in EDIT_RULE_TOOLS else "Read"
        if blocked_path is None:
            return [{"type": "setMode", "mode": "acceptEdits", "destination": "session"}] if family == "Edit" else []
        return [_add_allow_rule(family, "/" + blocked_path, "session")]  # ``//abs`` = an absolute path
    if tool_name == WEB_FETCH_TOOL:
        url = inputs.get("url")
        host = url_host(url) if isinstance(url, str) else None
        return [_add_allow_rule(WEB_FETCH_TOOL, f"domain:{host}", "localSettings")] if host else []
    return [_add_allow_rule(tool_name, None, "localSettings")]


# --- the session's own rules (H7) -------------------------------------------------------------------


class SessionPermissions(WireHolder):
    """Rules and mode a session gained from "always allow" answers (H7.1), kept per session in Redis so
    every tool worker's later decisions for the session honour them (H7.4). agentbus has one rule store per
    session: updates for ``localSettings``/``projectSettings``/``userSettings`` land here too (there is no
    project settings file on a bus; H7.2's files are not written)."""

    allow: list[str] = Field(default_factory=list)
    deny: list[str] = Field(default_factory=list)
    ask: list[str] = Field(default_factory=list)
    mode: PermissionMode | None = None


_MODES: frozenset[str] = frozenset({"default", "acceptEdits", "bypassPermissions", "plan", "dontAsk"})


def _rule_strings(update: JsonObject) -> list[str] | None:
    rules = update.get("rules")
    if not isinstance(rules, list):
        return None
    texts: list[str] = []
    for rule in rules:
        if not isinstance(rule, dict) or not isinstance(rule.get("toolName"), str):
            return None
        content = rule.get("ruleContent")
        if content is not None and not isinstance(content, str):
            return None
        texts.append(rule_text(str(rule["toolName"]), content))
    return texts


def apply_permission_updates(state: SessionPermissions, updates: Sequence[JsonValue]) -> SessionPermissions:
    """H7.1 on the session's rules: ``addRules`` appends (de-duplicated), ``replaceRules`` replaces the
    behaviour's list, ``removeRules`` removes, ``setMode`` switches the mode. Malformed updates, rules that
    do not parse and directory updates (agentbus has no additional directories) are ignored (H4.3)."""
    lists = {"allow": list(state.allow), "deny": list(state.deny), "ask": list(state.ask)}
    mode = state.mode
    for update in updates:
        if not isinstance(update, dict):
            continue
        kind = update.get("type")
        if kind == "setMode":
            new_mode = update.get("mode")
            if isinstance(new_mode, str) and new_mode in _MODES:
                mode = new_mode  # type: ignore[assignment]
            continue
        behavior = update.get("behavior")
        texts = _rule_strings(update)
        if kind not in ("addRules", "replaceRules", "removeRules") or behavior not in lists or texts is None:
            continue
        try:
            parse_rules(tuple(texts), behavior)  # type: ignore[arg-type]
        except InvalidPermissionRule:
            continue
        target = lists[str(behavior)]
        if kind == "replaceRules":
            target[:] = list(dict.fromkeys(texts))
        elif kind == "addRules":
            target.extend(text for text in texts if text not in target)
        else:
            target[:] = [text for text in target if text not in texts]
    return SessionPermissions(allow=lists["allow"], deny=lists["deny"], ask=lists["ask"], mode=mode)


def with_session_permissions(context: PermissionContext, session: SessionPermissions | None) -> PermissionContext:
    """The worker's context plus the session's own rules and mode (H7.4)."""
    if session is None or not (session.allow or session.deny or session.ask or session.mode):
        return context
    return replace(
        context,
        allow_rules=context.allow_rules + parse_rules(tuple(session.allow), "allow"),
        deny_rules=context.deny_rules + parse_rules(tuple(session.deny), "deny"),
        ask_rules=context.ask_rules + parse_rules(tuple(session.ask), "ask"),
        mode=session.mode or context.mode,
    )
