"""Claude Code permission rules: parsing and matching one rule against one call (pure).

Syntax (``settings.json`` ``permissions.allow|deny|ask`` entries), as read by agentbus:

* ``Tool`` — the whole tool (``Bash``, ``Read``, ``WebFetch``); ``Tool()`` and ``Tool(*)`` mean the
  same. Legacy names are normalized (``Task`` → ``Agent``, ``KillShell`` → ``TaskStop``, …).
* ``mcp__server`` / ``mcp__server__*`` — every tool of an MCP server; ``mcp__server__tool`` — one.
* ``Bash(CONTENT)`` — ``npm run test`` exact; ``git status:*`` prefix (the command equals the prefix or
  continues with a space: ``ls:*`` matches ``ls -la`` but not ``lsof``); any other unescaped ``*`` is a
  wildcard (``git * main``; a single trailing `` *`` also matches the bare command). ``:*`` is only
  valid at the end.
* ``Read(PATH)`` / ``Edit(PATH)`` — gitignore-style globs. ``//abs/path`` is an absolute path;
  ``~/x`` is under the home directory; ``/x`` and ``./x`` are anchored at the workspace root (the
  bus's equivalent of the directory holding the settings file); ``x`` without an inner ``/``
  matches that name at any depth under the workspace, ``x/y`` is anchored at the root; a match on a
  directory covers everything beneath it. ``Read`` rules govern Read/Glob/Grep/LS/NotebookRead,
  ``Edit`` rules govern Edit/Write/MultiEdit/NotebookEdit (path rules on those tool names are
  rejected with a hint rather than silently never matching).
* ``WebFetch(domain:example.com)`` — the URL's host equals the domain (case-insensitive).
* ``\\(``, ``\\)`` and ``\\\\`` escape parentheses and backslashes inside the content.

Anything else raises :class:`~agentbus_redis.errors.InvalidPermissionRule` naming the rule.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from agentbus_redis.errors import InvalidPermissionRule
from agentbus_redis.permissions.path_glob import gitignore_match, join_posix, normalize_posix, relative_to

RuleBehavior = Literal["allow", "deny", "ask"]

BASH_TOOL = "Bash"
WEB_FETCH_TOOL = "WebFetch"
READ_RULE_TOOLS = frozenset({"Read", "Glob", "Grep", "LS", "NotebookRead"})
"""Tools whose path is governed by ``Read(...)`` rules."""
EDIT_RULE_TOOLS = frozenset({"Edit", "Write", "MultiEdit", "NotebookEdit"})
"""Tools whose path is governed by ``Edit(...)`` rules."""

LEGACY_TOOL_NAMES = {
    "Task": "Agent",
    "KillShell": "TaskStop",
    "AgentOutputTool": "TaskOutput",
    "BashOutputTool": "TaskOutput",
}

_TOOL_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*(?:__\*)?$")


def canonical_tool_name(name: str) -> str:
    """Legacy tool names resolve to their current names (rules and calls alike)."""
    return LEGACY_TOOL_NAMES.get(name, name)


@dataclass(frozen=True, slots=True)
class PermissionRule:
    """One parsed rule. ``content`` is ``None`` for a whole-tool rule."""

    tool_name: str
    content: str | None
    behavior: RuleBehavior
    text: str

    def __str__(self) -> str:
        return self.text


def _find_unescaped(text: str, char: str, *, last: bool = False) -> int:
    """Index of the first (or last) ``char`` not preceded by an odd number of backslashes."""
    positions = range(len(text) - 1, -1, -1) if last else range(len(text))
    for index in positions:
        if text[index] != char:
            continue
        backslashes = 0
        while index - backslashes - 1 >= 0 and text[index - backslashes - 1] == "\\":
            backslashes += 1
        if backslashes % 2 == 0:
            return index
    return -1


def _unescape(content: str) -> str:
    return content.replace("\\(", "(").replace("\\)", ")").replace("\\\\", "\\")


def _validate_content(tool: str, content: str, fail: InvalidPermissionRuleFactory) -> None:
    """Per-tool content checks (the grammar in the module docstring)."""
    if tool == BASH_TOOL:
        if content.endswith(":*") and not content[:-2].strip():
            raise fail("empty command prefix before ':*'")
        if ":*" in content[:-2]:
            raise fail("':*' is only allowed at the end of a Bash rule")
        return
    if tool in ("Read", "Edit"):
        if not content.strip():
            raise fail("empty path pattern")
        return
    if tool == WEB_FETCH_TOOL:
        domain = content.removeprefix("domain:")
        if not content.startswith("domain:") or not domain.strip() or "/" in domain:
            raise fail("WebFetch rules are written WebFetch(domain:HOST)")
        return
    if tool == "Agent":  # A1.1: Agent(<type>) denies one agent type
        if not content.strip():
            raise fail("empty agent type")
        return
    if tool.startswith("mcp__"):
        raise fail("MCP rules name a server or tool and take no parenthesised content")
    if tool in EDIT_RULE_TOOLS:
        raise fail(f"path rules for {tool} are written Edit(...); Edit rules cover Edit/Write/MultiEdit/NotebookEdit")
    if tool in READ_RULE_TOOLS:
        raise fail(f"path rules for {tool} are written Read(...); Read rules cover Read/Glob/Grep/LS/NotebookRead")
    raise fail(f"content rules are understood for Bash, Read, Edit, WebFetch and Agent only, not {tool}")


class InvalidPermissionRuleFactory:
    """Builds :class:`InvalidPermissionRule` errors for one rule (keeps the location in one place)."""

    def __init__(self, text: str, behavior: RuleBehavior | None, index: int | None) -> None:
        self.text, self.behavior, self.index = text, behavior, index

    def __call__(self, reason: str) -> InvalidPermissionRule:
        return InvalidPermissionRule(self.text, reason, behavior=self.behavior, index=self.index)


def parse_rule(text: str, behavior: RuleBehavior = "allow", *, index: int | None = None) -> PermissionRule:
    """Parse one rule string (see the module docstring); raises :class:`InvalidPermissionRule`."""
    fail = InvalidPermissionRuleFactory(text, behavior, index)
    rule = text.strip()
    if not rule:
        raise fail("empty rule")
    open_at = _find_unescaped(rule, "(")
    if open_at == -1:
        if _find_unescaped(rule, ")") != -1:
            raise fail("closing parenthesis without an opening one")
        name, content = rule, None
    else:
        close_at = _find_unescaped(rule, ")", last=True)
        if close_at == -1 or close_at < open_at:
            raise fail("missing closing parenthesis")
        if close_at != len(rule) - 1:
            raise fail("text after the closing parenthesis")
        name, raw = rule[:open_at], rule[open_at + 1 : close_at]
        content = None if raw in ("", "*") else _unescape(raw)
    if not name:
        raise fail("missing tool name")
    if not _TOOL_NAME.match(name) or (name.endswith("__*") and not name.startswith("mcp__")):
        raise fail(f"{name!r} is not a tool name")
    name = canonical_tool_name(name)
    if content is not None:
        _validate_content(name, content, fail)
    return PermissionRule(tool_name=name, content=content, behavior=behavior, text=rule)


def parse_rules(texts: list[str] | tuple[str, ...], behavior: RuleBehavior) -> tuple[PermissionRule, ...]:
    """Parse a settings list; the first bad entry raises with its index."""
    return tuple(parse_rule(text, behavior, index=index) for index, text in enumerate(texts))


def _mcp_server(name: str) -> str | None:
    parts = name.split("__")
    return parts[1] if len(parts) >= 2 and parts[0] == "mcp" and parts[1] else None


def rule_matches_whole_tool(rule: PermissionRule, tool_name: str) -> bool:
    """A whole-tool rule naming this tool, or an MCP server rule covering it."""
    if rule.content is not None:
        return False
    tool = canonical_tool_name(tool_name)
    if rule.tool_name == tool:
        return True
    server = _mcp_server(rule.tool_name)
    server_level = rule.tool_name in (f"mcp__{server}", f"mcp__{server}__*")
    return server is not None and server_level and _mcp_server(tool) == server


def _wildcard_regex(pattern: str) -> re.Pattern[str]:
    """``*`` → any text (newlines too), ``\\*`` a literal star; a lone trailing `` *`` also matches
    the bare command (``git *`` matches ``git``)."""
    pieces: list[str] = []
    index = 0
    stars = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\" and index + 1 < len(pattern) and pattern[index + 1] in "*\\":
            pieces.append(re.escape(pattern[index + 1]))
            index += 2
            continue
        if char == "*":
            stars += 1
            pieces.append(".*")
        else:
            pieces.append(re.escape(char))
        index += 1
    body = "".join(pieces)
    if stars == 1 and body.endswith("\\ .*"):
        body = body[: -len("\\ .*")] + "(?: .*)?"
    return re.compile(f"^{body}$", re.DOTALL)


def _has_unescaped_star(text: str) -> bool:
    return _find_unescaped(text, "*") != -1


def bash_rule_matches(content: str, command: str) -> bool:
    """One Bash rule content against one (already split and stripped) command text."""
    command = command.strip()
    if content.endswith(":*"):
        prefix = content[:-2]
        return command == prefix or command.startswith(prefix + " ")
    if _has_unescaped_star(content):
        return _wildcard_regex(content.strip()).match(command) is not None
    return command == content


def bash_rule_could_match(content: str, words: Sequence[str | None]) -> bool:
    """Could this rule match the command once its run-time words (``None``) are known? True when a
    run-time word sits where the rule's literal leading words are compared, or anywhere from the
    rule's first wildcard on, or after all its words (``rm $X`` may be ``rm -rf x``)."""
    pattern = content[:-2] if content.endswith(":*") else content
    rule_words = pattern.strip().split(" ")
    for position, rule_word in enumerate(rule_words):
        if _has_unescaped_star(rule_word):
            return any(word is None for word in words[position:])
        if position >= len(words):
            return False
        word = words[position]
        if word is None:
            return True
        if word != rule_word.replace("\\*", "*").replace("\\\\", "\\"):
            return False
    return any(word is None for word in words[len(rule_words) :])


def bash_rule_is_exact(content: str) -> bool:
    """True for a rule that names one exact command (no prefix, no wildcard)."""
    return not content.endswith(":*") and not _has_unescaped_star(content)


def path_rule_matches(content: str, absolute_path: str, *, workspace_root: str, home_dir: str | None) -> bool:
    """A ``Read``/``Edit`` path pattern against a normalized absolute path."""
    if content.startswith("//"):
        root, pattern = "/", content[1:]
    elif content.startswith("~/") or content == "~":
        if home_dir is None:
            return False
        root, pattern = normalize_posix(home_dir), "/" + content[2:]
    elif content.startswith("./"):
        root, pattern = workspace_root, "/" + content[2:]
    else:
        root, pattern = workspace_root, content
    relative = relative_to(normalize_posix(absolute_path), root)
    if relative is None:
        return False
    if relative == ".":
        return pattern.strip("/") in ("**", "")
    return gitignore_match(pattern, relative)


def url_host(url: str) -> str | None:
    """The lower-cased host of an absolute URL (no port, no credentials), or ``None``."""
    scheme_end = url.find("://")
    if scheme_end <= 0:
        return None
    rest = url[scheme_end + 3 :]
    for stop in "/?#":
        rest = rest.split(stop, 1)[0]
    rest = rest.rsplit("@", 1)[-1]
    bracketed = rest.startswith("[")  # an IPv6 literal: [::1]:8080
    host = rest[1 : rest.find("]")] if bracketed and "]" in rest else rest.split(":", 1)[0] if not bracketed else ""
    return host.lower() or None


def web_fetch_rule_matches(content: str, url: str) -> bool:
    """``domain:HOST`` against the URL's host."""
    host = url_host(url)
    return host is not None and host == content.removeprefix("domain:").strip().lower()


def resolve_input_path(raw: str, *, workspace_root: str, home_dir: str | None) -> str:
    """A tool's path argument as a normalized absolute path (``~`` expanded, relative → workspace)."""
    if (raw == "~" or raw.startswith("~/")) and home_dir is not None:
        return join_posix(home_dir, raw[2:] or ".")
    return join_posix(workspace_root, raw)
