"""POSIX path arithmetic and glob patterns, without touching a file system.

Used by the permission rules (gitignore-style ``Read(./src/**)`` patterns) and by the Glob/Grep
tools, so both agree on what a pattern means:

* ``*`` matches any run of characters except ``/``; ``?`` one character except ``/``;
* ``**`` as a whole path segment matches zero or more segments (``a/**/b`` matches ``a/b``);
* ``[abc]`` / ``[!abc]`` / ``[^abc]`` character classes; ``{x,y}`` alternatives (no nesting);
* ``\\x`` escapes ``x``.
"""

from __future__ import annotations

import re
from functools import lru_cache


def normalize_posix(path: str) -> str:
    """Collapse ``.``, ``..`` and repeated slashes lexically; ``..`` never climbs above ``/``.

    Absolute paths stay absolute; a relative path stays relative (a leading ``..`` is kept)."""
    absolute = path.startswith("/")
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts and parts[-1] != "..":
                parts.pop()
            elif not absolute:
                parts.append("..")
            continue
        parts.append(part)
    joined = "/".join(parts)
    if absolute:
        return "/" + joined
    return joined or "."


def join_posix(base: str, path: str) -> str:
    """``path`` resolved against ``base`` (an absolute ``path`` wins), normalized lexically."""
    return normalize_posix(path if path.startswith("/") else f"{base}/{path}")


def relative_to(path: str, root: str) -> str | None:
    """``path`` relative to ``root`` (both normalized absolute paths), or ``None`` when outside.

    The root itself is ``"."``."""
    if path == root:
        return "."
    prefix = root if root.endswith("/") else root + "/"
    return path[len(prefix) :] if path.startswith(prefix) else None


def is_within(path: str, root: str) -> bool:
    """True when ``path`` is ``root`` or lies beneath it (lexical check on normalized paths)."""
    return relative_to(path, root) is not None


def _translate_segment(segment: str) -> str:
    """Regex for one path segment (no ``/`` inside)."""
    out: list[str] = []
    index = 0
    while index < len(segment):
        char = segment[index]
        if char == "\\" and index + 1 < len(segment):
            out.append(re.escape(segment[index + 1]))
            index += 2
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            close = segment.find(
                "]", index + 2 if index + 1 < len(segment) and segment[index + 1] in "!^" else index + 1
            )
            if close == -1:
                out.append(re.escape(char))
            else:
                body = segment[index + 1 : close]
                negate = body[:1] in ("!", "^")
                if negate:
                    body = body[1:]
                body = body.replace("\\", "\\\\")
                out.append(f"[^/{body}]" if negate else f"[{body}]")
                index = close + 1
                continue
        else:
            out.append(re.escape(char))
        index += 1
    return "".join(out)


def _expand_braces(pattern: str) -> list[str]:
    """``a{b,c}d`` → ``[abd, acd]``; one level of braces at a time, recursively."""
    depth = 0
    start = -1
    for index, char in enumerate(pattern):
        if char == "\\":
            continue
        if char == "{":
            if depth == 0:
                start = index
            depth += 1
        elif char == "}" and depth:
            depth -= 1
            if depth == 0 and "," in pattern[start:index]:
                head, body, tail = pattern[:start], pattern[start + 1 : index], pattern[index + 1 :]
                options: list[str] = []
                level = 0
                current = ""
                for inner in body:
                    if inner == "{":
                        level += 1
                    elif inner == "}":
                        level -= 1
                    if inner == "," and level == 0:
                        options.append(current)
                        current = ""
                    else:
                        current += inner
                options.append(current)
                return [expanded for option in options for expanded in _expand_braces(head + option + tail)]
    return [pattern]


def _translate(pattern: str) -> str:
    segments = pattern.split("/")
    pieces: list[str] = []
    for position, segment in enumerate(segments):
        last = position == len(segments) - 1
        if segment == "**":
            # Zero or more whole segments (and, when last, everything below).
            pieces.append(".*" if last else "(?:[^/]+/)*")
            continue
        pieces.append(_translate_segment(segment) + ("" if last else "/"))
    return "".join(pieces)


@lru_cache(maxsize=1024)
def glob_regex(pattern: str) -> re.Pattern[str]:
    """A compiled regex matching relative POSIX paths against ``pattern`` in full."""
    alternatives = [_translate(option) for option in _expand_braces(pattern)]
    return re.compile("^(?:" + "|".join(alternatives) + ")$", re.DOTALL)


def glob_match(pattern: str, relative_path: str) -> bool:
    """True when the relative POSIX path matches ``pattern`` (anchored at both ends)."""
    return glob_regex(pattern).match(relative_path) is not None


def gitignore_match(pattern: str, relative_path: str) -> bool:
    """gitignore semantics relative to a root: a pattern without an inner ``/`` matches a path
    component at any depth; a leading ``/`` anchors it at the root; a trailing ``/`` is dropped
    (we cannot tell directories apart without I/O); a match on a directory covers everything
    beneath it."""
    body = pattern
    if body.endswith("/") and len(body) > 1:
        body = body.rstrip("/")
    anchored = body.startswith("/") or "/" in body
    body = body.lstrip("/")
    if not body:
        return True
    if not anchored:
        body = "**/" + body
    parts = relative_path.split("/")
    return any(glob_match(body, "/".join(parts[:length])) for length in range(1, len(parts) + 1))
