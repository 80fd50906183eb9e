"""Tool-specific permission checks (pure): Bash commands, file paths, WebFetch domains.

Each returns a :class:`~shared.permission_types.ToolCheck`; :mod:`shared.permissions` combines it
with the whole-tool rules and the mode.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from shared.bash_commands import (
    SimpleCommand,
    Words,
    split_command,
    strip_env_assignments,
    strip_grouping,
    strip_wrappers,
    strip_xargs,
)
from shared.json_types import JsonValue
from shared.path_glob import is_within, join_posix, relative_to
from shared.permission_rules import (
    BASH_TOOL,
    EDIT_RULE_TOOLS,
    WEB_FETCH_TOOL,
    PermissionRule,
    bash_rule_is_exact,
    bash_rule_matches,
    path_rule_matches,
    resolve_input_path,
    url_host,
    web_fetch_rule_matches,
)
from shared.permission_types import DecisionReason, ToolCheck

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


def _fixed_point(seed: Words, steps: Sequence[Callable[[Words], Words]]) -> list[Words]:
    """Every word list reachable from ``seed`` by repeatedly applying ``steps`` (order kept)."""
    seen: list[Words] = []
    frontier = [seed]
    while frontier:
        words = frontier.pop(0)
        if words in seen or not words:
            continue
        seen.append(words)
        frontier.extend(step(words) for step in steps)
    return seen


def _strip_all_env(words: Words) -> Words:
    return strip_env_assignments(words, only_safe=False)


def _deny_candidates(command: SimpleCommand) -> list[str]:
    """Texts a deny/ask rule is tried against: hard to dodge (every env prefix, wrapper, bare xargs
    and subshell/group bracket stripped, in any order and combination)."""
    steps = (_strip_all_env, strip_wrappers, strip_xargs, strip_grouping)
    texts = [command.text.strip()]
    texts.extend(" ".join(words) for words in _fixed_point(command.words, steps))
    return list(dict.fromkeys(texts))


def _allow_candidates(command: SimpleCommand) -> list[str]:
    """Texts an allow rule is tried against: only harmless env prefixes, then wrappers (in that
    order, like the shell: ``timeout 5 FOO=1 cmd`` would run a program called ``FOO=1``)."""
    safe_env = strip_env_assignments(command.words, only_safe=True)
    texts = [command.text.strip(), " ".join(command.words), " ".join(safe_env), " ".join(strip_wrappers(safe_env))]
    return list(dict.fromkeys(texts))


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


def check_bash(command: str, deny: Rules, ask: Rules, allow: Rules, *, workspace_root: str) -> ToolCheck:
    """Deny if any part is denied; ask if any part hits an ask rule; allow only if the whole text
    is an exact allowed command or EVERY part is allowed by some rule (and writes nowhere outside
    the workspace); lines with substitutions, here-docs or subshells are never allowed by rules."""
    full = command.strip()
    line = split_command(command)
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
