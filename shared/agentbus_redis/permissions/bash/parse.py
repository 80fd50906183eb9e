"""Read a bash command line with tree-sitter's bash grammar (pure computation; issue 15).

The one place agentbus touches the parser: :func:`parse_command_line` turns a line into a
:class:`~agentbus_redis.permissions.bash.commands.CommandLine` (see that module for what it holds). Words are unquoted
the way bash does it (``\\rm`` → ``rm``, ``'rm'`` / ``r''m`` → ``rm``, ``$'\\x72m'`` → ``rm``); a word
that holds an expansion, a substitution or an unquoted glob/brace pattern has no static value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING

from agentbus_redis.permissions.bash.commands import CommandLine, SimpleCommand
from agentbus_redis.permissions.bash.wrappers import Arg, Args, resolve_invocations

if TYPE_CHECKING:
    from tree_sitter import Node, Parser


@cache
def _parser() -> Parser:
    """One parser per process (a parse is synchronous; do not share it between threads), built at the first
    parse: the event models import this module, and a CLI command reading a log never parses bash (issue 27)."""
    import tree_sitter_bash
    from tree_sitter import Language, Parser

    return Parser(Language(tree_sitter_bash.language()))


MAX_SCRIPT_DEPTH = 3
"""``bash -c "eval 'sh -c …'"``: literal scripts are read this many levels deep, deeper is unknowable."""

_OPAQUE = {
    "command_substitution": "command substitution",
    "process_substitution": "process substitution",
    "heredoc_redirect": "here-document",
    "subshell": "subshell or group",
    "compound_statement": "subshell or group",
    "function_definition": "function definition",
    "if_statement": "control flow",
    "while_statement": "control flow",
    "for_statement": "control flow",
    "c_style_for_statement": "control flow",
    "case_statement": "control flow",
}
"""Constructs whose effect a rule on the words cannot bound: never approved by allow rules."""

_OUTPUT_OPERATORS = frozenset({">", ">>", ">|", "&>", "&>>", ">&", "<>"})
_PATTERN = re.compile(r"[*?]|\[.*\]|\{.*(?:,|\.\.).*\}")
"""Unquoted glob or brace expansion: the word's value depends on the file system or expands to several."""
_DOUBLE_QUOTE_ESCAPES = frozenset('$`"\\\n')
_ANSI_C_ESCAPES = {
    "a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
    "\\": "\\", "'": "'", '"': '"', "?": "?",
}  # fmt: skip


def _text(node: Node) -> str:
    return (node.text or b"").decode("utf-8", "replace")


def _unescape_word(text: str) -> str:
    """An unquoted word: a backslash quotes the next character; backslash-newline is removed."""
    return re.sub(r"\\(.)", lambda match: "" if match.group(1) == "\n" else match.group(1), text, flags=re.DOTALL)


def _unescape_double_quoted(text: str) -> str:
    """Inside ``"…"`` a backslash only quotes ``$ ` " \\`` and newline."""
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        following = text[index + 1] if index + 1 < len(text) else ""
        if char == "\\" and following and following in _DOUBLE_QUOTE_ESCAPES:
            out.append("" if following == "\n" else following)
            index += 2
            continue
        out.append(char)
        index += 1
    return "".join(out)


def _decode_ansi_c(body: str) -> str | None:
    """``$'…'``: C escapes (``\\x72``, ``\\162``, ``\\u0072``, ``\\n`` …); ``\\cX`` is left unknown."""
    out: list[str] = []
    index = 0
    while index < len(body):
        char = body[index]
        if char != "\\" or index + 1 >= len(body):
            out.append(char)
            index += 1
            continue
        code = body[index + 1]
        digits, base, width = ("01234567", 8, 3) if code in "01234567" else ("0123456789abcdefABCDEF", 16, 0)
        width = {"x": 2, "u": 4, "U": 8}.get(code, width)
        if code in _ANSI_C_ESCAPES:
            out.append(_ANSI_C_ESCAPES[code])
            index += 2
        elif width:
            start = index + 1 if base == 8 else index + 2
            end = start
            while end < len(body) and end - start < width and body[end] in digits:
                end += 1
            if end == start or int(body[start:end], base) > 0x10FFFF:
                return None
            out.append(chr(int(body[start:end], base)))
            index = end
        else:
            return None  # \cX and unknown escapes
    return "".join(out)


def _skeleton(node: Node) -> str:
    """The unquoted characters of a word (escaped and quoted ones masked), for pattern detection."""
    if node.type == "word":
        return re.sub(r"\\.", "_", _text(node), flags=re.DOTALL)
    if node.type in ("concatenation", "command_name"):
        return "".join(_skeleton(child) for child in node.children)
    return "_"


def _static_value(node: Node) -> str | None:
    """The word's value after quote removal, or ``None`` when it is only known at run time."""
    kind = node.type
    if kind in ("word", "number"):
        return _unescape_word(_text(node))
    if kind == "raw_string":
        return _text(node)[1:-1]
    if kind == "ansi_c_string":
        return _decode_ansi_c(_text(node)[2:-1])
    if kind in ("string", "translated_string"):
        inner = node.named_children[0] if kind == "translated_string" and node.named_children else node
        parts: list[str] = []
        for child in inner.children:
            if child.type == "string_content":
                parts.append(_unescape_double_quoted(_text(child)))
            elif child.type != '"':
                return None
        return "".join(parts)
    if kind in ("concatenation", "command_name"):
        values = [_static_value(child) for child in node.children]
        known = [value for value in values if value is not None]
        return "".join(known) if values and len(known) == len(values) else None
    if kind == "variable_assignment":
        name, value = node.child_by_field_name("name"), node.child_by_field_name("value")
        assigned = "" if value is None else _static_value(value)
        return None if name is None or assigned is None else f"{_text(name)}={assigned}"
    return None


def _arg(node: Node) -> Arg:
    value = _static_value(node)
    if value is not None and _PATTERN.search(_skeleton(node)):
        value = None
    return Arg(value, _text(node))


def _redirect_target(redirect: Node) -> tuple[str | None, list[Node]]:
    """An output redirection's file (``None`` for input and ``2>&1``-style duplications) and the
    words bash gives the command after it (``rm x > f y`` runs ``rm x y``)."""
    destinations = redirect.children_by_field_name("destination")
    if redirect.type != "file_redirect" or not destinations:
        return None, []
    operator = next((_text(child) for child in redirect.children if not child.is_named), "")
    target = _arg(destinations[0])
    duplication = operator.endswith("&") and (target.text.isdigit() or target.text == "-")
    is_file = operator in _OUTPUT_OPERATORS and not duplication
    return (target.text if is_file else None), destinations[1:]


def _is_statement(node: Node) -> bool:
    """A ``NAME=value`` on its own, not the prefix of a command or an ``export`` argument."""
    return node.parent is not None and node.parent.type not in (
        "command",
        "declaration_command",
        "variable_assignments",
    )


@dataclass
class _Reader:
    """Walks one parse tree, collecting commands and what makes the line opaque or unknowable."""

    depth: int
    commands: list[SimpleCommand] = field(default_factory=list)
    opaque: list[str] = field(default_factory=list)
    unknowable: list[str] = field(default_factory=list)
    redirects: dict[int, list[Node]] = field(default_factory=dict)
    """Redirections the grammar hangs on a list or pipeline, by the command bash applies them to."""

    def note(self, reasons: list[str], reason: str) -> None:
        if reason not in reasons:
            reasons.append(reason)

    def walk(self, root: Node) -> None:
        stack = [root]
        while stack:
            node = stack.pop()
            kind = node.type
            if node.is_error or node.is_missing:
                self.note(self.unknowable, "syntax this check cannot read")
                self.note(self.opaque, "syntax this check cannot read")
            if kind in _OPAQUE:
                self.note(self.opaque, _OPAQUE[kind])
            if kind == "redirected_statement":
                self.attach_redirects(node)
            if kind in ("command", "declaration_command", "unset_command"):
                self.command(node)
            elif kind in ("variable_assignment", "variable_assignments") and _is_statement(node):
                self.assignment(node)
            stack.extend(reversed(node.children))

    def assignment(self, node: Node) -> None:
        """A bare ``NAME=value`` statement: no program, but an allow rule must still cover it."""
        parts = node.named_children if node.type == "variable_assignments" else [node]
        words = tuple(_text(part) for part in parts)
        self.commands.append(SimpleCommand(_text(node), " ".join(words), (), words))

    def attach_redirects(self, statement: Node) -> None:
        """``a && b > f`` parses as ``(a && b) > f``, but bash redirects only ``b``: the last command."""
        body = statement.child_by_field_name("body")
        while body is not None and body.type in ("list", "pipeline", "negated_command", "redirected_statement"):
            body = body.named_children[-1] if body.named_children else None
        if body is not None:
            self.redirects.setdefault(body.id, []).extend(statement.children_by_field_name("redirect"))

    def command(self, node: Node) -> None:
        words: list[Node] = []
        redirects = list(self.redirects.get(node.id, ()))
        for index, child in enumerate(node.children):
            if node.field_name_for_child(index) == "redirect":
                redirects.append(child)
            elif child.is_named or node.type != "command":
                words.append(child)
        targets: list[str] = []
        for redirect in redirects:
            target, extra_words = _redirect_target(redirect)
            if target is not None:
                targets.append(target)
            words.extend(extra_words)
        assignments = [word for word in words if word.type == "variable_assignment" and node.type == "command"]
        argv: Args = tuple(
            _arg(word) if word.is_named else Arg(_text(word), _text(word))  # export / local / unset
            for word in words
            if word not in assignments
        )
        sources = tuple(_text(word) for word in words)
        invocations = tuple(resolve_invocations(argv))
        text = " ".join([_text(node), *(_text(redirect) for redirect in redirects if redirect.parent != node)])
        self.commands.append(SimpleCommand(text, " ".join(sources), tuple(targets), sources, invocations))
        for invocation in invocations:
            if invocation.unknowable is not None:
                self.note(self.opaque, invocation.unknowable)
            if invocation.script is not None:
                self.script(invocation.script)

    def script(self, script: str) -> None:
        """A literal script run by ``bash -c`` / ``eval`` / ``trap``: its commands count as this line's."""
        if self.depth >= MAX_SCRIPT_DEPTH:
            self.note(self.unknowable, "shell scripts nested too deep")
            self.note(self.opaque, "shell scripts nested too deep")
            return
        inner = _read(script, self.depth + 1)
        self.commands.extend(inner.commands)
        for reason in inner.opaque:
            self.note(self.opaque, reason)
        for reason in inner.unknowable:
            self.note(self.unknowable, reason)


def _read(line: str, depth: int) -> _Reader:
    reader = _Reader(depth)
    reader.walk(_parser().parse(line.encode("utf-8", "surrogatepass")).root_node)
    return reader


def parse_command_line(line: str) -> CommandLine:
    """Every simple command of ``line`` and what keeps rules from bounding it (module docstring)."""
    reader = _read(line, 0)
    return CommandLine(tuple(reader.commands), tuple(reader.opaque), tuple(reader.unknowable))
