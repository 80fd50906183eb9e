"""What program a simple command really runs, once wrappers are seen through (pure; issue 15).

``command rm x``, ``env -i A=1 rm x``, ``exec rm x``, ``nice -n 5 rm x``, ``timeout -s KILL 5 rm x``,
``nohup rm x``, ``time rm x``, ``sudo -u root rm x``, ``stdbuf -oL rm x``, ``xargs -0 rm``, ``find . -exec
rm {} ;`` and ``/bin/rm x`` all run ``rm``: :func:`resolve_invocations` lists every stage of that
unwrapping so a deny rule can match any of them. Where the program cannot be known before the
command runs — a name from ``$X`` or ``$(…)``, a glob, ``eval`` of run-time text, ``source``, a shell
reading a file or stdin, an option of a wrapper this module does not know — the invocation says
why (``unknowable``). A literal script (``bash -c 'rm x'``, ``eval rm x``, ``trap 'rm x' EXIT``) is
handed back as ``script`` for the parser to read as more commands.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class Arg:
    """One word of a command."""

    value: str | None
    """The word after quote removal; ``None`` when it is only known at run time (expansion,
    substitution, glob or brace pattern)."""
    source: str
    """The word as written."""

    @property
    def text(self) -> str:
        """What a rule is matched against: the value, or the source of a run-time word."""
        return self.source if self.value is None else self.value


Args = tuple[Arg, ...]


@dataclass(frozen=True, slots=True)
class Invocation:
    """One program a simple command runs, with every wrapper stage (the command as written first)."""

    stages: tuple[Args, ...]
    unknowable: str | None = None
    """Why the program finally run cannot be known statically (``None`` when it can)."""
    script: str | None = None
    """A literal shell script the program runs (``bash -c``, ``eval``, ``trap``)."""
    reads_arguments: bool = False
    """More arguments arrive at run time (``xargs``, ``find -exec``)."""


@dataclass(frozen=True, slots=True)
class _Wrapper:
    valued: frozenset[str] = frozenset()
    """Options that take a value (the next word, or ``--opt=value`` / ``-oVALUE``)."""
    flags: frozenset[str] = frozenset()
    """Options without a value (short ones may be combined: ``-0r``)."""
    operands: int = 0
    """Words between the options and the program (``timeout``'s duration)."""
    assignments: bool = False
    """``NAME=value`` words may precede the program (``env``)."""


def _set(*words: str) -> frozenset[str]:
    return frozenset(words)


_WRAPPERS: dict[str, _Wrapper] = {
    "command": _Wrapper(flags=_set("-p", "-v", "-V")),
    "builtin": _Wrapper(),
    "exec": _Wrapper(valued=_set("-a"), flags=_set("-c", "-l")),
    "env": _Wrapper(
        valued=_set("-u", "-C", "--unset", "--chdir"),
        flags=_set("-i", "-0", "-", "--ignore-environment", "--null"),
        assignments=True,
    ),
    "nice": _Wrapper(valued=_set("-n", "--adjustment")),
    "timeout": _Wrapper(
        valued=_set("-s", "-k", "--signal", "--kill-after"),
        flags=_set("--foreground", "--preserve-status", "-v", "--verbose"),
        operands=1,
    ),
    "nohup": _Wrapper(),
    "time": _Wrapper(flags=_set("-p")),
    "coproc": _Wrapper(),
    "setsid": _Wrapper(flags=_set("-f", "-w", "-c", "--fork", "--wait", "--ctty")),
    "stdbuf": _Wrapper(valued=_set("-i", "-o", "-e", "--input", "--output", "--error")),
    "sudo": _Wrapper(
        valued=_set("-u", "-g", "-h", "-p", "-C", "-D", "-r", "-t", "-U", "-T", "-R", "--user", "--group"),
        flags=_set("-E", "-H", "-n", "-S", "-b", "-k", "-K", "-P", "-A", "-B", "-N", "-i", "-s", "--preserve-env"),
    ),
    "doas": _Wrapper(valued=_set("-u", "-C"), flags=_set("-n", "-s")),
    "busybox": _Wrapper(),
    "chroot": _Wrapper(valued=_set("--userspec", "--groups"), flags=_set("--skip-chdir"), operands=1),
    "xargs": _Wrapper(
        valued=_set(
            "-I",
            "-n",
            "-P",
            "-L",
            "-d",
            "-s",
            "-a",
            "-E",
            "--max-args",
            "--max-procs",
            "--delimiter",
            "--arg-file",
            "--replace",
            "--max-lines",
            "--eof",
            "--max-chars",
            "--process-slot-var",
        ),
        flags=_set("-0", "-r", "-t", "-p", "-x", "-o", "-i", "-l", "-e", "--null", "--no-run-if-empty", "--verbose"),
    ),
}
"""Programs that run their argument as a command. ``command -v``/``-V`` only look it up."""

_SHELLS = _set("sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish")
_SHELL_VALUED = _set("-o", "+o", "-O", "+O", "--rcfile", "--init-file")
_EXEC_ACTIONS = _set("-exec", "-execdir", "-ok", "-okdir")
_REPLACE_OPTIONS = _set("-I", "--replace")


def program_name(word: str) -> str:
    """``/usr/bin/rm`` → ``rm``: the program a path runs, for matching."""
    return word.rsplit("/", 1)[-1] if "/" in word.rstrip("/") else word


def split_assignment(word: str) -> tuple[str, str] | None:
    """``NAME=value`` → ``(NAME, value)``; ``None`` for any other word."""
    name, sep, value = word.partition("=")
    if not sep or not name or not (name[0].isalpha() or name[0] == "_"):
        return None
    return (name, value) if all(char.isalnum() or char == "_" for char in name) else None


@dataclass(frozen=True, slots=True)
class _Unwrapped:
    program_at: int
    options: dict[str, str]


def _unwrap(name: str, wrapper: _Wrapper, stage: Args) -> _Unwrapped | str:
    """The index of the wrapped program in ``stage`` and the options seen, or why it is unknowable."""
    index = 1
    options: dict[str, str] = {}
    while index < len(stage):
        word = stage[index].value
        if word is None:
            return f"an argument of {name} known only at run time"
        if word == "--":
            index += 1
            break
        if wrapper.assignments and split_assignment(word) is not None:
            index += 1
            continue
        if not word.startswith("-") or (word == "-" and "-" not in wrapper.flags):
            break
        option, has_value, value = word.partition("=")
        if option in wrapper.valued:
            following = stage[index + 1].text if index + 1 < len(stage) else ""
            options[option] = value if has_value else following
            index += 1 if has_value else 2
        elif option in wrapper.flags and not has_value:
            options[option] = ""
            index += 1
        elif not word.startswith("--") and word[:2] in wrapper.valued:
            options[word[:2]] = word[2:]  # -n5, -oL
            index += 1
        elif not word.startswith("--") and all(f"-{char}" in wrapper.flags for char in word[1:]):
            options.update(dict.fromkeys((f"-{char}" for char in word[1:]), ""))
            index += 1
        elif name == "nice" and word[1:].isdigit():
            index += 1  # nice -10
        else:
            return f"an option {word} of {name} this check does not know"
    return _Unwrapped(index + wrapper.operands, options)


class _Unknowable(Exception):
    """What a command runs cannot be known statically (the message says why)."""


def _shell_script(stage: Args) -> str:
    """``bash [options] -c SCRIPT``: the script, or raises :class:`_Unknowable`."""
    index, has_c = 1, False
    while index < len(stage):
        word = stage[index].value
        if word is None:
            raise _Unknowable("a shell option known only at run time")
        if word == "--":
            index += 1
            break
        if word in _SHELL_VALUED:
            index += 2
        elif word.startswith("--"):
            index += 1
        elif len(word) > 1 and word[0] in "-+":
            has_c = has_c or (word[0] == "-" and "c" in word[1:])
            index += 1
        else:
            break
    if not has_c or index >= len(stage):
        raise _Unknowable("a shell reading commands from a file or standard input")
    script = stage[index].value
    if script is None:
        raise _Unknowable("a shell script known only at run time")
    return script


def _literal_text(name: str, args: Args) -> str:
    """``eval a b`` runs the text ``a b``; it must be known statically."""
    values = [arg.value for arg in args]
    if any(value is None for value in values):
        raise _Unknowable(f"{name} of text known only at run time")
    return " ".join(value for value in values if value is not None)


def _runs_script(name: str, stage: Args) -> str | None:
    """The literal script a shell / ``eval`` / ``trap`` runs; raises :class:`_Unknowable` when the
    commands it runs cannot be known (``source``, an alias or path-hash definition too)."""
    if name in _SHELLS:
        return _shell_script(stage)
    if name == "eval":
        return _literal_text(name, stage[1:]) if len(stage) > 1 else None
    if name == "trap":
        return _literal_text(name, stage[1:2]) if len(stage) > 2 else None
    if name in ("source", "."):
        raise _Unknowable(f"{name} of a script file")
    if name == "alias" and any(arg.value is None or "=" in arg.value for arg in stage[1:]):
        raise _Unknowable("an alias definition")
    if name == "hash" and any(arg.value is None or arg.value.startswith("-p") for arg in stage[1:]):
        raise _Unknowable("a command-path definition (hash -p)")
    return None


def _find_actions(stage: Args) -> list[Invocation]:
    """``find … -exec rm {} ;``: each action's command, fed file names at run time."""
    found: list[Invocation] = []
    index = 1
    while index < len(stage):
        if stage[index].value not in _EXEC_ACTIONS:
            index += 1
            continue
        end = index + 1
        while end < len(stage) and stage[end].value not in (";", "+"):
            end += 1
        if end > index + 1:
            found.extend(replace(inner, reads_arguments=True) for inner in resolve_invocations(stage[index + 1 : end]))
        index = end + 1
    return found


def resolve_invocations(argv: Args) -> list[Invocation]:
    """Every program ``argv`` runs (usually one; ``find -exec`` adds its actions), see the module."""
    stages: list[Args] = []
    also: list[Invocation] = []
    reads_arguments = False
    replace_string: str | None = None
    index = 0
    while index < len(argv):
        stage = argv[index:]
        stages.append(stage)
        head = stage[0].value
        if head is None or (replace_string and replace_string in head) or "{}" in head:
            return [Invocation(tuple(stages), "a program name known only at run time", None, reads_arguments), *also]
        name = program_name(head)
        wrapper = _WRAPPERS.get(name)
        if wrapper is not None:
            unwrapped = _unwrap(name, wrapper, stage)
            if isinstance(unwrapped, str):
                return [Invocation(tuple(stages), unwrapped, None, reads_arguments), *also]
            if name == "command" and ("-v" in unwrapped.options or "-V" in unwrapped.options):
                break  # a lookup, runs nothing
            if name == "xargs":
                reads_arguments = True
                replace_string = next((unwrapped.options[k] for k in _REPLACE_OPTIONS if k in unwrapped.options), None)
            index += unwrapped.program_at
            continue
        try:
            script = _runs_script(name, stage)
        except _Unknowable as reason:
            return [Invocation(tuple(stages), str(reason), None, reads_arguments), *also]
        if name == "find":
            also.extend(_find_actions(stage))
        return [Invocation(tuple(stages), None, script, reads_arguments), *also]
    return [Invocation(tuple(stages), None, None, reads_arguments), *also] if stages else also
