"""A small, quote-aware reading of a shell command line for permission checks (pure).

This is **not** a shell parser. It finds what a permission check needs:

* the simple commands of a compound line, split at unquoted ``&&``, ``||``, ``;``, ``|``,
  ``|&``, ``&`` and newlines (``a && b; c | d`` → ``a``, ``b``, ``c``, ``d``);
* each command's output redirections (``> f``, ``>> f``, ``2> f``, ``&> f``; ``2>&1`` and other
  descriptor duplications are not files), so ``python x.py > out.txt`` can match ``Bash(python:*)``
  while the target is still checked against the workspace;
* constructs whose effect a text match cannot bound — command substitution ``$(…)`` / backticks,
  process substitution ``<(…)``, here-documents ``<<``, subshells ``( … )`` and groups ``{ …; }`` —
  reported as ``opaque`` so no allow rule ever approves them (deny rules still apply).

Words keep their quotes (rules match the command text the model wrote); unquoted comments are
dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

_SEPARATORS = ("&&", "||", "|&", ";;", ";", "|", "&", "\n")
_OUTPUT_REDIRECTS = ("&>>", "&>", ">>", ">|", ">&", ">", "<>")
_INPUT_REDIRECTS = ("<<<", "<<-", "<<", "<&", "<")


@dataclass(frozen=True, slots=True)
class SimpleCommand:
    """One command of a compound line."""

    text: str
    """The words of the command (quotes kept), single-space separated, redirections included."""
    text_without_redirects: str
    """The same without output redirections."""
    output_targets: tuple[str, ...]
    """Files the command's output is redirected to (as written, quotes removed)."""
    words: tuple[str, ...] = ()
    """The words of ``text_without_redirects`` (quotes kept; a quoted word may contain spaces)."""


@dataclass(frozen=True, slots=True)
class CommandLine:
    """A command line split into simple commands."""

    commands: tuple[SimpleCommand, ...]
    opaque: tuple[str, ...]
    """Why a text match cannot bound this line (empty when it can)."""


def _unquote(word: str) -> str:
    """Remove shell quoting from a word (good enough for redirect targets)."""
    out: list[str] = []
    quote = ""
    index = 0
    while index < len(word):
        char = word[index]
        if quote == "'":
            if char == "'":
                quote = ""
            else:
                out.append(char)
        elif char == "\\" and index + 1 < len(word) and quote != "'":
            out.append(word[index + 1])
            index += 1
        elif quote == '"':
            if char == '"':
                quote = ""
            else:
                out.append(char)
        elif char in "'\"":
            quote = char
        else:
            out.append(char)
        index += 1
    return "".join(out)


@dataclass
class _Token:
    kind: str  # "word" | "sep" | "out" | "in"
    text: str
    start: int
    end: int


class _Scanner:
    """Turns a command line into word / operator tokens, noting opaque constructs."""

    def __init__(self, line: str) -> None:
        self.line = line
        self.tokens: list[_Token] = []
        self.opaque: list[str] = []
        self._word: list[str] = []
        self._word_start = 0
        self._word_quoted = False

    def _add(self, index: int, piece: str, *, quoted: bool = False) -> None:
        if not self._word:
            self._word_start = index
        self._word.append(piece)
        self._word_quoted = self._word_quoted or quoted

    def _flush(self, end: int) -> None:
        if self._word:
            self.tokens.append(_Token("word", "".join(self._word), self._word_start, end))
        self._word = []
        self._word_quoted = False

    def _note(self, reason: str) -> None:
        if reason not in self.opaque:
            self.opaque.append(reason)

    def _quoted(self, start: int, quote: str) -> int:
        """Consume a quoted section starting at ``start`` (the quote); return the index after it."""
        index = start + 1
        while index < len(self.line):
            char = self.line[index]
            if quote == '"' and char == "\\" and index + 1 < len(self.line):
                index += 2
                continue
            if quote == '"' and (char == "`" or self.line.startswith("$(", index)):
                self._note("command substitution")
            if char == quote:
                return index + 1
            index += 1
        self._note("unterminated quote")
        return index

    def scan(self) -> None:
        line = self.line
        index = 0
        while index < len(line):
            char = line[index]
            if char in "'\"":
                end = self._quoted(index, char)
                self._add(index, line[index:end], quoted=True)
                index = end
                continue
            if char == "\\":
                if line.startswith("\\\n", index):
                    self._flush(index)
                else:
                    self._add(index, line[index : index + 2])
                index += 2
                continue
            if char == "#" and not self._word:
                newline = line.find("\n", index)
                index = len(line) if newline == -1 else newline
                continue
            if char == "`":
                self._note("command substitution")
            if char == "(":
                previous = line[index - 1] if index else " "
                if previous == "$":
                    self._note("command substitution")
                elif previous in ("<", ">"):
                    self._note("process substitution")
                else:
                    self._note("subshell or group")
            if char in " \t":
                self._flush(index)
                index += 1
                continue
            operator = self._operator_at(index)
            if operator is not None:
                kind, text = operator
                start = index
                if kind in ("out", "in") and self._word and "".join(self._word).isdigit() and not self._word_quoted:
                    text = "".join(self._word) + text  # a descriptor prefix such as 2>
                    start = self._word_start
                    self._word = []
                self._flush(index)
                bare = text.lstrip("0123456789")
                if bare.startswith("<<") and not bare.startswith("<<<"):
                    self._note("here-document")
                self.tokens.append(_Token(kind, text, start, index + len(operator[1])))
                index += len(operator[1])
                continue
            self._add(index, char)
            index += 1
        self._flush(len(line))

    def _operator_at(self, index: int) -> tuple[str, str] | None:
        line = self.line
        for text in _OUTPUT_REDIRECTS:
            if line.startswith(text, index):
                return ("out", text)
        for text in _INPUT_REDIRECTS:
            if line.startswith(text, index):
                return ("in", text)
        for text in _SEPARATORS:
            if line.startswith(text, index):
                return ("sep", text)
        return None


def _is_descriptor_target(operator: str, target: str) -> bool:
    """``2>&1``, ``>&2``, ``<&0``, ``>&-``: a descriptor duplication, not a file."""
    return operator.endswith("&") and (target.isdigit() or target == "-")


def _build_command(line: str, tokens: list[_Token]) -> SimpleCommand | None:
    if not tokens:
        return None
    kept: list[str] = []
    targets: list[str] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        target = tokens[index + 1] if index + 1 < len(tokens) and tokens[index + 1].kind == "word" else None
        if token.kind == "out":
            if target is not None and not _is_descriptor_target(token.text, target.text):
                targets.append(_unquote(target.text))
            index += 2 if target is not None else 1
            continue
        kept.append(line[token.start : token.end])
        index += 1
    text = line[tokens[0].start : tokens[-1].end]
    return SimpleCommand(
        text=text, text_without_redirects=" ".join(kept), output_targets=tuple(targets), words=tuple(kept)
    )


def split_command(line: str) -> CommandLine:
    """Split a command line into its simple commands (see the module docstring)."""
    scanner = _Scanner(line)
    scanner.scan()
    commands: list[SimpleCommand] = []
    current: list[_Token] = []
    for token in [*scanner.tokens, _Token("sep", ";", len(line), len(line))]:
        if token.kind == "sep":
            command = _build_command(line, current)
            if command is not None:
                commands.append(command)
            current = []
        else:
            current.append(token)
    opaque = list(scanner.opaque)
    grouped = any(command.text == "{" or command.text.startswith("{ ") for command in commands)
    if grouped and "subshell or group" not in opaque:
        opaque.append("subshell or group")
    return CommandLine(commands=tuple(commands), opaque=tuple(opaque))


_SAFE_ENV_NAMES = frozenset(
    {
        "LANG",
        "LANGUAGE",
        "LC_ALL",
        "LC_CTYPE",
        "LC_MESSAGES",
        "TZ",
        "TERM",
        "NO_COLOR",
        "FORCE_COLOR",
        "COLUMNS",
        "NODE_ENV",
        "RUST_LOG",
        "RUST_BACKTRACE",
        "PYTHONUNBUFFERED",
        "PYTHONDONTWRITEBYTECODE",
        "GOOS",
        "GOARCH",
        "CGO_ENABLED",
    }
)
"""Variables that only change formatting/locale/log verbosity, never which code runs. ``PATH``,
``LD_*``, ``PYTHONPATH``, ``NODE_OPTIONS`` and the like are deliberately absent."""


def _split_assignment(word: str) -> tuple[str, str] | None:
    name, sep, value = word.partition("=")
    if not sep or not name or not (name[0].isalpha() or name[0] == "_"):
        return None
    if not all(char.isalnum() or char == "_" for char in name):
        return None
    return name, value


Words = tuple[str, ...]


def strip_env_assignments(words: Words, *, only_safe: bool) -> Words:
    """Drop leading ``NAME=value`` words. Deny/ask rules strip every assignment (``FOO="a b" rm x``
    still hits ``rm:*``); allow rules (``only_safe``) strip only :data:`_SAFE_ENV_NAMES` with plain
    values — no ``$``, backticks, quotes or backslashes — and stop at the first other word."""
    while len(words) > 1:
        assignment = _split_assignment(words[0])
        if assignment is None:
            break
        if only_safe and (assignment[0] not in _SAFE_ENV_NAMES or any(c in assignment[1] for c in "$`'\"\\")):
            break
        words = words[1:]
    return words


def _is_duration(word: str) -> bool:
    body = word[:-1] if word[-1:] in ("s", "m", "h", "d") else word
    head, _, tail = body.partition(".")
    return bool(head.isdigit() and (not tail or tail.isdigit()))


def strip_wrappers(words: Words) -> Words:
    """Drop wrappers that just run their argument: ``timeout [-s SIG|-k D|--foreground] DUR``,
    ``time``, ``nohup``, ``nice [-n N]`` (repeatedly), so ``timeout 10 npm test`` matches
    ``npm test``. Unrecognised wrapper flags leave the words as they are (no match, no approval)."""
    while len(words) > 1:
        head, rest = words[0], words[1:]
        if head in ("time", "nohup"):
            words = rest[1:] if rest[:1] == ("--",) and len(rest) > 1 else rest
            continue
        if head == "nice":
            if len(rest) > 2 and rest[0] == "-n" and rest[1].lstrip("-").isdigit():
                rest = rest[2:]
            words = rest
            continue
        if head == "timeout":
            position = 0
            while position < len(rest) and rest[position] in ("--foreground", "--preserve-status", "-s", "-k"):
                position += 2 if rest[position] in ("-s", "-k") else 1
            if position < len(rest) - 1 and _is_duration(rest[position]):
                words = rest[position + 1 :]
                continue
        break
    return words


def strip_xargs(words: Words) -> Words:
    """``xargs rm -f`` → ``rm -f`` (a bare ``xargs`` without flags); used for deny rules."""
    return words[1:] if len(words) > 1 and words[0] == "xargs" and not words[1].startswith("-") else words


def strip_grouping(words: Words) -> Words:
    """``(rm x`` / ``rm x)`` / ``{ rm x ;}`` → ``rm x``: the parts of a subshell or group, for deny rules."""
    trimmed = [word for word in words if word not in ("{", "}", "(", ")")]
    if trimmed:
        trimmed[0] = trimmed[0].lstrip("(")
        trimmed[-1] = trimmed[-1].rstrip(")")
    return tuple(word for word in trimmed if word)
