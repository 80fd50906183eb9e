"""A command line read for permission checks: its simple commands and what keeps rules from
bounding it (pure data and the allow-side word helpers; issue 15).

:mod:`agentbus_redis.permissions.bash.parse` builds a :class:`CommandLine` with a real shell parser (tree-sitter's bash
grammar): every simple command anywhere in the line — after ``&&``, ``||``, ``;``, ``|``, ``&``,
newlines, inside subshells, groups, functions, control flow, command and process substitutions, and
inside literal scripts run by ``bash -c`` / ``eval`` / ``trap`` — with its words as written, their
values after quote removal, its output redirections, and the program(s) it really runs
(:mod:`agentbus_redis.permissions.bash.wrappers`). ``opaque`` names constructs no allow rule may approve; an
invocation's
``unknowable`` says when even a deny rule cannot be checked.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentbus_redis.permissions.bash.wrappers import Invocation, split_assignment


@dataclass(frozen=True, slots=True)
class SimpleCommand:
    """One simple command of a line."""

    text: str
    """The command as written, redirections included."""
    text_without_redirects: str
    """Its words (leading ``NAME=value`` included, quotes kept), single-space separated."""
    output_targets: tuple[str, ...]
    """Files the command's output is redirected to (quotes removed; run-time words as written)."""
    words: tuple[str, ...] = ()
    """The words of ``text_without_redirects`` (quotes kept; a quoted word may contain spaces)."""
    invocations: tuple[Invocation, ...] = ()
    """The program(s) it runs, wrappers seen through (empty for a bare ``NAME=value``)."""


@dataclass(frozen=True, slots=True)
class CommandLine:
    """A command line read into simple commands."""

    commands: tuple[SimpleCommand, ...]
    opaque: tuple[str, ...]
    """Why no allow rule may approve this line (empty when rules can bound it)."""
    unknowable: tuple[str, ...] = ()
    """Why what this line runs cannot be known at all (syntax the parser does not understand)."""


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


Words = tuple[str, ...]


def strip_safe_env_assignments(words: Words) -> Words:
    """Drop leading ``NAME=value`` words of :data:`_SAFE_ENV_NAMES` with plain values — no ``$``,
    backticks, quotes or backslashes — stopping at the first other word (for allow rules: deny rules
    see the program itself, :mod:`agentbus_redis.permissions.bash.wrappers`)."""
    while len(words) > 1:
        assignment = split_assignment(words[0])
        if assignment is None or assignment[0] not in _SAFE_ENV_NAMES or any(c in assignment[1] for c in "$`'\"\\"):
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
