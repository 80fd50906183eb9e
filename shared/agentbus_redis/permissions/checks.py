"""Tool-specific permission checks (pure): Bash commands, file paths, WebFetch domains.

Each returns a :class:`~agentbus_redis.permissions.types.ToolCheck`; :mod:`agentbus_redis.permissions.decide` combines
it
with the whole-tool rules and the mode.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agentbus_redis.json_types import JsonValue
from agentbus_redis.permissions.bash.commands import (
    CommandLine,
    SimpleCommand,
    strip_safe_env_assignments,
    strip_wrappers,
)
from agentbus_redis.permissions.bash.parse import parse_command_line
from agentbus_redis.permissions.bash.wrappers import Invocation, program_name
from agentbus_redis.permissions.path_glob import is_within, join_posix, relative_to
from agentbus_redis.permissions.rules import (
    BASH_TOOL,
    EDIT_RULE_TOOLS,
    WEB_FETCH_TOOL,
    PermissionRule,
    bash_rule_could_match,
    bash_rule_is_exact,
    bash_rule_matches,
    path_rule_matches,
    resolve_input_path,
    url_host,
    web_fetch_rule_matches,
)
from agentbus_redis.permissions.types import DecisionReason, ToolCheck

Rules = Sequence[PermissionRule]

SENSITIVE_DIRECTORIES = frozenset({".git", ".claude", ".vscode", ".idea"})
SENSITIVE_FILES = frozenset(
    {
        ".gitconfig",
        ".gitmodules",
        ".bashrc",
        ".bash_profile",
        ".zshrc",
        ".zprofile",
        ".profile",
        ".ripgreprc",
        ".mcp.json",
        ".claude.json",
    }
)
"""Edits here can run code or leak data later (git hooks, shell start-up, tool configs)."""


def _content_rules(rules: Rules, tool: str) -> list[tuple[str, PermissionRule]]:
    return [(rule.content, rule) for rule in rules if rule.tool_name == tool and rule.content is not None]


# --- Bash -------------------------------------------------------------------------------------


def _stage_texts(invocation: Invocation) -> list[str]:
    """Each wrapper stage as text (run-time words as written), and again with the program's path
    reduced to its name (``/bin/rm x`` → ``rm x``)."""
    texts: list[str] = []
    for stage in invocation.stages:
        words = [arg.text for arg in stage]
        texts.append(" ".join(words))
        if program_name(words[0]) != words[0]:
            texts.append(" ".join([program_name(words[0]), *words[1:]]))
    return texts


def _deny_candidates(command: SimpleCommand) -> list[str]:
    """Texts a deny/ask rule is tried against: the command as written, and every program it runs
    with quotes removed, ``NAME=value`` prefixes, wrappers and program paths stripped."""
    texts = [command.text.strip(), command.text_without_redirects]
    for invocation in command.invocations:
        texts.extend(_stage_texts(invocation))
    return list(dict.fromkeys(texts))


def _allow_candidates(command: SimpleCommand) -> list[str]:
    """Texts an allow rule is tried against: the words as written (quotes kept), only harmless env
    prefixes, then wrappers (in that order, like the shell: ``timeout 5 FOO=1 cmd`` would run a
    program called ``FOO=1``)."""
    safe_env = strip_safe_env_assignments(command.words)
    texts = [command.text.strip(), " ".join(command.words), " ".join(safe_env), " ".join(strip_wrappers(safe_env))]
    return list(dict.fromkeys(texts))


def _unbounded(command: SimpleCommand, rules: list[tuple[str, PermissionRule]]) -> str | None:
    """Why a deny/ask rule might match what this command runs without matching its text: a program
    known only at run time (any rule), or run-time words where a rule compares words."""
    for invocation in command.invocations:
        if invocation.unknowable is not None:
            return invocation.unknowable
        for stage in invocation.stages:
            words = [arg.value for arg in stage] + ([None] if invocation.reads_arguments else [])
            if None not in words:
                continue
            named = [program_name(words[0]) if words[0] is not None else None, *words[1:]]
            if any(bash_rule_could_match(content, named) for content, _ in rules):
                return "arguments known only at run time"
    return None


def _first_match(rules: list[tuple[str, PermissionRule]], candidates: Sequence[str]) -> PermissionRule | None:
    for content, rule in rules:
        if any(bash_rule_matches(content, candidate) for candidate in candidates):
            return rule
    return None


def _target_inside(target: str, workspace_root: str) -> bool:
    """An output redirection may write ``/dev/null`` or a plain path inside the workspace."""
    if target in ("/dev/null", "/dev/stdout", "/dev/stderr"):
        return True
    if not target or any(char in target for char in "$`~*?[{"):
        return False
    return is_within(join_posix(workspace_root, target), workspace_root)


def _needs_approval_message(parts: Sequence[str], total: int) -> str:
    if total <= 1:
        return f"Claude requested permissions to use {BASH_TOOL}, but you haven't granted it yet."
    noun, verb = ("part", "requires") if len(parts) == 1 else ("parts", "require")
    return f"This {BASH_TOOL} command contains multiple operations. The following {noun} {verb} approval: " + ", ".join(
        parts
    )


def _unchecked_reason(line: CommandLine, rules: list[tuple[str, PermissionRule]]) -> str | None:
    """Why the deny/ask ``rules`` cannot be checked on this line (``None`` when they can)."""
    if not rules:
        return None
    if line.unknowable:
        return line.unknowable[0]
    return next((reason for part in line.commands if (reason := _unbounded(part, rules)) is not None), None)


def check_bash(command: str, deny: Rules, ask: Rules, allow: Rules, *, workspace_root: str) -> ToolCheck:
    """Deny if any part is denied; ask if any part hits an ask rule, or if a deny/ask rule could hit
    a program only known at run time (a safety check: survives bypass mode and whole-tool allows);
    allow only if the whole text is an exact allowed command or EVERY part is allowed by some rule
    (and writes nowhere outside the workspace); opaque lines are never allowed by rules."""
    full = command.strip()
    line = parse_command_line(command)
    denied = f"Permission to use {BASH_TOOL} with command {full} has been denied."
    deny_rules, ask_rules, allow_rules = (_content_rules(rules, BASH_TOOL) for rules in (deny, ask, allow))
    for rules, behavior in ((deny_rules, "deny"), (ask_rules, "ask")):
        exact = next((rule for content, rule in rules if bash_rule_is_exact(content) and content == full), None)
        hit = exact or next(
            (rule for part in line.commands if (rule := _first_match(rules, _deny_candidates(part))) is not None),
            None,
        )
        if hit is not None and behavior == "deny":
            return ToolCheck("deny", "rule", denied, hit)
        if hit is not None:
            message = f"Permission rule '{hit.text}' requires approval for this {BASH_TOOL} command"
            return ToolCheck("ask", "rule", message, hit)
    unchecked = _unchecked_reason(line, deny_rules + ask_rules)
    if unchecked is not None:
        message = f"This {BASH_TOOL} command contains {unchecked}, so its permission rules cannot be checked"
        return ToolCheck("ask", "safety_check", message)
    exact_allow = next((rule for content, rule in allow_rules if bash_rule_is_exact(content) and content == full), None)
    if exact_allow is not None:
        return ToolCheck("allow", "rule", rule=exact_allow)
    if line.opaque:
        reasons = ", ".join(line.opaque)
        return ToolCheck("passthrough", "requires_approval", f"This {BASH_TOOL} command contains {reasons}")
    matched: list[PermissionRule] = []
    missing: list[str] = []
    for part in line.commands:
        rule = _first_match(allow_rules, _allow_candidates(part))
        if rule is None or not all(_target_inside(target, workspace_root) for target in part.output_targets):
            missing.append(part.text_without_redirects or part.text)
        else:
            matched.append(rule)
    if missing or not matched:
        return ToolCheck("passthrough", "requires_approval", _needs_approval_message(missing, len(line.commands)))
    return ToolCheck("allow", "rule", rule=matched[0], rules=tuple(matched))


# --- file paths -------------------------------------------------------------------------------


def path_inputs(
    tool_name: str, inputs: Mapping[str, JsonValue], workspace_root: str, home_dir: str | None
) -> list[str]:
    """The absolute path(s) a file tool call touches, from its input (search tools default to the
    workspace root)."""
    key = "notebook_path" if tool_name.startswith("Notebook") else "file_path"
    if tool_name in ("Glob", "Grep", "LS"):
        key = "path"
    raw = inputs.get(key)
    if raw is None and key == "path":
        return [workspace_root]
    if not isinstance(raw, str) or not raw:
        return []
    return [resolve_input_path(raw, workspace_root=workspace_root, home_dir=home_dir)]


def is_sensitive_path(path: str, workspace_root: str) -> bool:
    """Inside a sensitive directory or one of the sensitive files (case-insensitive)."""
    relative = relative_to(path, workspace_root)
    parts = [part.lower() for part in (relative if relative is not None else path).split("/") if part]
    return bool(parts) and (parts[-1] in SENSITIVE_FILES or any(part in SENSITIVE_DIRECTORIES for part in parts))


def _path_rule(rules: Rules, family: str, path: str, root: str, home: str | None) -> PermissionRule | None:
    for rule in rules:
        content = rule.content
        if (
            rule.tool_name == family
            and content is not None
            and path_rule_matches(content, path, workspace_root=root, home_dir=home)
        ):
            return rule
    return None


def check_path(
    tool_name: str,
    paths: Sequence[str],
    deny: Rules,
    ask: Rules,
    allow: Rules,
    *,
    workspace_root: str,
    home_dir: str | None,
    accept_edits: bool,
    protect_sensitive: bool,
) -> ToolCheck:
    """Reads: deny → ask → (an Edit allow rule implies read) → inside the workspace → Read allow.
    Edits: deny → sensitive path (asks even in bypass mode) → ask → acceptEdits inside the workspace
    → Edit allow. Every path must pass; the first failing one is named."""
    if not paths:
        return ToolCheck("passthrough")
    is_edit = tool_name in EDIT_RULE_TOOLS
    family, verb, wants = ("Edit", "edit", "write to") if is_edit else ("Read", "read", "read from")
    for path in paths:
        rule = _path_rule(deny, family, path, workspace_root, home_dir)
        if rule is not None:
            return ToolCheck("deny", "rule", f"Permission to {verb} {path} has been denied.", rule)
    if is_edit and protect_sensitive:
        sensitive = next((path for path in paths if is_sensitive_path(path, workspace_root)), None)
        if sensitive is not None:
            message = f"Claude requested permissions to edit {sensitive} which is a sensitive file."
            return ToolCheck("ask", "safety_check", message)
    for path in paths:
        rule = _path_rule(ask, family, path, workspace_root, home_dir)
        if rule is not None:
            return ToolCheck(
                "ask", "rule", f"Claude requested permissions to {wants} {path}, but you haven't granted it yet.", rule
            )
    reasons: list[DecisionReason] = []
    rules: list[PermissionRule] = []
    for path in paths:
        inside = is_within(path, workspace_root)
        rule = _path_rule(allow, "Edit", path, workspace_root, home_dir)
        if rule is None and not is_edit:
            rule = _path_rule(allow, "Read", path, workspace_root, home_dir)
        if rule is not None:
            reasons.append("rule")
            rules.append(rule)
        elif inside and (not is_edit or accept_edits):
            reasons.append("mode" if is_edit else "workspace")
        else:
            message = f"Claude requested permissions to {wants} {path}, but you haven't granted it yet."
            return ToolCheck("passthrough", "requires_approval", message)
    return ToolCheck("allow", reasons[0], rule=rules[0] if rules else None, rules=tuple(rules))


# --- WebFetch ---------------------------------------------------------------------------------


def check_web_fetch(url: str, deny: Rules, ask: Rules, allow: Rules) -> ToolCheck:
    """``WebFetch(domain:HOST)`` rules against the URL's host."""
    host = url_host(url)
    if host is None:
        return ToolCheck("passthrough")
    for rules, behavior in ((deny, "deny"), (ask, "ask"), (allow, "allow")):
        for content, rule in _content_rules(rules, WEB_FETCH_TOOL):
            if web_fetch_rule_matches(content, url):
                if behavior == "deny":
                    return ToolCheck("deny", "rule", f"{WEB_FETCH_TOOL} denied access to domain:{host}.", rule)
                if behavior == "ask":
                    return ToolCheck("ask", "rule", f"Claude requested permissions to fetch from {host}.", rule)
                return ToolCheck("allow", "rule", rule=rule)
    return ToolCheck("passthrough")
