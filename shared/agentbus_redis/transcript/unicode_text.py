"""Text UTF-8 cannot carry: invalid bytes in a transcript line, and JSON escapes that decode to lone
surrogates (``"\\ud83d"`` without its low half, e.g. an emoji cut in two by a tool's output cap).

JSON allows such escapes and ``JSON.parse`` keeps them, so the line models keep them too (lossless);
they only become a problem when the text is encoded as UTF-8 (stdout, a file, an HTTP body). Readers
decode invalid bytes with U+FFFD and say so; writers either replace lone surrogates with U+FFFD (an API
request, which must be valid UTF-8) or escape them back (a JSONL line, as ``JSON.stringify`` does).
"""

from __future__ import annotations

import json
import re

REPLACEMENT_CHARACTER = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")
_ESCAPE_PREFIXES = ("\\ud", "\\uD")


def decode_utf8_replacing(data: bytes) -> tuple[str, int]:
    """``data`` decoded as UTF-8, each invalid byte sequence replaced by U+FFFD (as ``errors="replace"``
    does), and how many sequences were replaced."""
    pieces: list[str] = []
    replaced = 0
    start = 0
    while True:
        try:
            pieces.append(data[start:].decode("utf-8"))
        except UnicodeDecodeError as error:
            pieces.append(data[start : start + error.start].decode("utf-8"))
            pieces.append(REPLACEMENT_CHARACTER)
            replaced += 1
            start += error.end
        else:
            return "".join(pieces), replaced


def count_lone_surrogates(text: str) -> int:
    """Code points U+D800–U+DFFF in a decoded string: every one is lone (Python joins valid pairs)."""
    return len(_SURROGATE.findall(text))


def replace_lone_surrogates(text: str) -> tuple[str, int]:
    """``text`` with every lone surrogate replaced by U+FFFD, and how many were replaced."""
    return _SURROGATE.subn(REPLACEMENT_CHARACTER, text)


def escape_lone_surrogates(json_text: str) -> str:
    """JSON text (from ``json.dumps(..., ensure_ascii=False)``) with lone surrogates written back as
    ``\\udXXX`` escapes: UTF-8-encodable and the same JSON value (``JSON.stringify`` does the same)."""
    return _SURROGATE.sub(lambda match: f"\\u{ord(match.group()):04x}", json_text)


def json_line_lone_surrogates(text: str) -> int:
    """How many strings' code points in the JSON ``text`` are lone surrogates (0 without even a ``\\ud``
    escape, which is nearly every line, so this costs a substring search)."""
    if not any(prefix in text for prefix in _ESCAPE_PREFIXES):
        return 0
    try:
        value = json.loads(text)
    except ValueError:
        return 0
    return count_lone_surrogates(json.dumps(value, ensure_ascii=False))


def well_formed_json(value: object) -> tuple[str, int]:
    """``json.dumps(value, ensure_ascii=False)`` made encodable as UTF-8: lone surrogates are replaced by
    U+FFFD. Returns the text and how many were replaced."""
    return replace_lone_surrogates(json.dumps(value, ensure_ascii=False))
