"""Claude Code's permission model for a headless bus: rules, checks and the decision for one tool call."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentbus_redis.permissions.checks import (
        SENSITIVE_DIRECTORIES,
        SENSITIVE_FILES,
        Rules,
        check_bash,
        check_path,
        check_web_fetch,
        is_sensitive_path,
        path_inputs,
    )
    from agentbus_redis.permissions.decide import AskPolicy, PermissionContext, PermissionMode, check_permission, decide
    from agentbus_redis.permissions.path_glob import (
        gitignore_match,
        glob_match,
        glob_regex,
        is_within,
        join_posix,
        normalize_posix,
        relative_to,
    )
    from agentbus_redis.permissions.rules import (
        BASH_TOOL,
        EDIT_RULE_TOOLS,
        LEGACY_TOOL_NAMES,
        READ_RULE_TOOLS,
        WEB_FETCH_TOOL,
        InvalidPermissionRuleFactory,
        PermissionRule,
        RuleBehavior,
        bash_rule_could_match,
        bash_rule_is_exact,
        bash_rule_matches,
        canonical_tool_name,
        parse_rule,
        parse_rules,
        path_rule_matches,
        resolve_input_path,
        rule_matches_whole_tool,
        url_host,
        web_fetch_rule_matches,
    )
    from agentbus_redis.permissions.types import Behavior, DecisionReason, PermissionDecision, ToolCheck

__all__ = [
    "BASH_TOOL",
    "EDIT_RULE_TOOLS",
    "LEGACY_TOOL_NAMES",
    "READ_RULE_TOOLS",
    "SENSITIVE_DIRECTORIES",
    "SENSITIVE_FILES",
    "WEB_FETCH_TOOL",
    "AskPolicy",
    "Behavior",
    "DecisionReason",
    "InvalidPermissionRuleFactory",
    "PermissionContext",
    "PermissionDecision",
    "PermissionMode",
    "PermissionRule",
    "RuleBehavior",
    "Rules",
    "ToolCheck",
    "bash_rule_could_match",
    "bash_rule_is_exact",
    "bash_rule_matches",
    "canonical_tool_name",
    "check_bash",
    "check_path",
    "check_permission",
    "check_web_fetch",
    "decide",
    "gitignore_match",
    "glob_match",
    "glob_regex",
    "is_sensitive_path",
    "is_within",
    "join_posix",
    "normalize_posix",
    "parse_rule",
    "parse_rules",
    "path_inputs",
    "path_rule_matches",
    "relative_to",
    "resolve_input_path",
    "rule_matches_whole_tool",
    "url_host",
    "web_fetch_rule_matches",
]

_MODULE_OF = {
    "AskPolicy": "decide",
    "BASH_TOOL": "rules",
    "Behavior": "types",
    "DecisionReason": "types",
    "EDIT_RULE_TOOLS": "rules",
    "InvalidPermissionRuleFactory": "rules",
    "LEGACY_TOOL_NAMES": "rules",
    "PermissionContext": "decide",
    "PermissionDecision": "types",
    "PermissionMode": "decide",
    "PermissionRule": "rules",
    "READ_RULE_TOOLS": "rules",
    "RuleBehavior": "rules",
    "Rules": "checks",
    "SENSITIVE_DIRECTORIES": "checks",
    "SENSITIVE_FILES": "checks",
    "ToolCheck": "types",
    "WEB_FETCH_TOOL": "rules",
    "bash_rule_could_match": "rules",
    "bash_rule_is_exact": "rules",
    "bash_rule_matches": "rules",
    "canonical_tool_name": "rules",
    "check_bash": "checks",
    "check_path": "checks",
    "check_permission": "decide",
    "check_web_fetch": "checks",
    "decide": "decide",
    "gitignore_match": "path_glob",
    "glob_match": "path_glob",
    "glob_regex": "path_glob",
    "is_sensitive_path": "checks",
    "is_within": "path_glob",
    "join_posix": "path_glob",
    "normalize_posix": "path_glob",
    "parse_rule": "rules",
    "parse_rules": "rules",
    "path_inputs": "checks",
    "path_rule_matches": "rules",
    "relative_to": "path_glob",
    "resolve_input_path": "rules",
    "rule_matches_whole_tool": "rules",
    "url_host": "rules",
    "web_fetch_rule_matches": "rules",
}


def __getattr__(name: str) -> Any:
    # The façade imports a module only when one of its names is asked for (import time matters for the CLI).
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
