"""Helpers shared by the file tools: text decoding, binary detection, patches, sizes."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

from agentbus_redis.json_types import JsonObject
from agentbus_redis.tools.tool import ToolError

BINARY_EXTENSIONS = frozenset(
    {
        *("exe", "dll", "so", "dylib", "bin", "o", "a", "lib", "class", "jar", "war", "pyc", "pyo", "wasm"),
        *("zip", "gz", "tgz", "bz2", "xz", "7z", "rar", "tar", "zst", "lz4"),
        *("bmp", "ico", "tif", "tiff", "psd", "heic", "avif"),
        *("mp3", "mp4", "wav", "flac", "ogg", "avi", "mov", "mkv", "webm", "m4a"),
        *("pdf", "doc", "docx", "xls", "xlsx", "ppt", "pptx", "odt"),
        *("ttf", "otf", "woff", "woff2", "eot"),
        *("sqlite", "db", "dat", "iso", "dmg", "img", "pkl", "npy", "npz", "parquet"),
    }
)
IMAGE_MEDIA_TYPES = {
    "png": "image/png",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "gif": "image/gif",
    "webp": "image/webp",
}
SNIFF_BYTES = 8192


def extension(path: str | Path) -> str:
    """Lower-case extension without the dot (``""`` when none)."""
    suffix = Path(path).suffix
    return suffix[1:].lower() if suffix else ""


def looks_binary(sample: bytes) -> bool:
    """A NUL byte in the first bytes means binary (what git and grep assume)."""
    return b"\x00" in sample


def format_size(size: int) -> str:
    """``512 bytes``, ``1.5KB``, ``256KB``, ``3.2MB``."""
    if size < 1024:
        return f"{size} bytes"
    value, unit = size / 1024, "KB"
    for bigger in ("MB", "GB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{value:.1f}".rstrip("0").rstrip(".") + unit


def read_text(path: Path, shown_path: str) -> str:
    """The whole file as UTF-8 text (raises :class:`ToolError` for binary or undecodable files)."""
    data = path.read_bytes()
    if looks_binary(data[:SNIFF_BYTES]):
        raise ToolError(f"{shown_path} appears to be a binary file; only text files can be edited.")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ToolError(f"{shown_path} is not valid UTF-8 text ({error.reason} at byte {error.start}).") from error


def write_text(path: Path, text: str) -> None:
    """Write UTF-8 text exactly (no newline translation), creating parent directories. What it creates
    belongs to the owner of the directory it is created in (a root worker writing into a workspace its
    sandboxed commands own: they can change the file afterwards)."""
    existing = next(parent for parent in (path, *path.parents) if parent.exists())
    created = [parent for parent in (path, *path.parents) if parent != existing and not parent.exists()]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="") as handle:
        handle.write(text)
    if os.geteuid() == 0 and created:
        owner = existing.stat()
        if owner.st_uid != 0:
            for item in created:
                os.chown(item, owner.st_uid, owner.st_gid, follow_symlinks=False)


def structured_patch(old: str, new: str, *, context: int = 3) -> list[JsonObject]:
    """Unified-diff hunks ``{oldStart, oldLines, newStart, newLines, lines}`` (Claude Code's
    ``structuredPatch`` shape; lines are prefixed with `` ``, ``-`` or ``+``)."""
    old_lines = old.split("\n")
    new_lines = new.split("\n")
    hunks: list[JsonObject] = []
    matcher = difflib.SequenceMatcher(a=old_lines, b=new_lines, autojunk=False)
    for group in matcher.get_grouped_opcodes(context):
        first, last = group[0], group[-1]
        lines: list[str] = []
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                lines.extend(" " + line for line in old_lines[i1:i2])
                continue
            lines.extend("-" + line for line in old_lines[i1:i2])
            lines.extend("+" + line for line in new_lines[j1:j2])
        old_count = last[2] - first[1]
        new_count = last[4] - first[3]
        hunks.append(
            {
                "oldStart": first[1] + 1 if old_count else first[1],
                "oldLines": old_count,
                "newStart": first[3] + 1 if new_count else first[3],
                "newLines": new_count,
                "lines": list(lines),
            }
        )
    return hunks
