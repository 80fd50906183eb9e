"""Building and serializing transcript lines (R7.3).

A message line is ``{chain fields} + {the message's own fields} + {session stamp}`` with JavaScript
object-spread semantics: a later key overrides the value of an earlier one but keeps its position, and
a key whose value is "undefined" (``None`` in the stamp, unset chain fields) is absent from the line.
Lines are compact JSON (no spaces), non-ASCII characters unescaped, like ``JSON.stringify``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import orjson

from agentbus_redis.config.build_info import DISTRIBUTION
from agentbus_redis.json_types import JsonObject, JsonValue

IN_MEMORY_ONLY_FIELDS = ("parentUuid", "isSidechain")
"""R7.19 ``removeExtraFields``: chain position is the store's business, never the message's. A message
that still carries them (e.g. read from another transcript) gets them reassigned (R7.8)."""


_IN_MEMORY_PARENT, _IN_MEMORY_SIDECHAIN = IN_MEMORY_ONLY_FIELDS

_OWN_FIELDS_FIRST = ("type", "subtype", "message", "uuid", "timestamp")
"""Claude Code's factories put these first; pydantic would dump ``uuid``/``timestamp`` first."""


def _agentbus_version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "0.0.0"


def read_git_branch(cwd: str) -> str | None:
    """The checked-out branch of the git work tree containing ``cwd`` (``None`` outside git or on a
    detached HEAD). Reads ``.git/HEAD`` directly: no subprocess per write batch."""
    directory = Path(cwd)
    for candidate in (directory, *directory.parents):
        git = candidate / ".git"
        try:
            if git.is_file():  # a worktree or submodule: ".git" is "gitdir: <path>"
                pointer = git.read_text(encoding="utf-8").strip()
                if not pointer.startswith("gitdir:"):
                    return None
                git = (candidate / pointer.removeprefix("gitdir:").strip()).resolve()
            head_file = git / "HEAD"
            if not head_file.is_file():
                continue
            head = head_file.read_text(encoding="utf-8").strip()
        except OSError:
            return None
        prefix = "ref: refs/heads/"
        return head.removeprefix(prefix) if head.startswith(prefix) else None
    return None


@dataclass(frozen=True, slots=True)
class SessionStamp:
    """R7.3: the fields stamped last on every message line (they always win)."""

    user_type: str = "external"
    """``$USER_TYPE`` in Claude Code."""
    entrypoint: str | None = None
    """``$CLAUDE_CODE_ENTRYPOINT`` (cli, sdk-ts, sdk-py…); absent when ``None``."""
    version: str = field(default_factory=_agentbus_version)
    slug: str | None = None
    git_branch: Callable[[str], str | None] | None = read_git_branch
    """Looked up once per write batch from the batch's cwd; ``None`` disables the lookup."""

    def values(self, *, cwd: str, session_id: str) -> dict[str, JsonValue | None]:
        """The stamp of one write batch, in Claude Code's key order (``None`` = key removed)."""
        return {
            "userType": self.user_type,
            "entrypoint": self.entrypoint,
            "cwd": cwd,
            "sessionId": session_id,
            "version": self.version,
            "gitBranch": self.git_branch(cwd) if self.git_branch is not None else None,
            "slug": self.slug,
        }


@dataclass(frozen=True, slots=True)
class ChainFields:
    """R7.3/R7.8: the chain part of a line, computed by the store."""

    parent_uuid: str | None
    is_sidechain: bool
    logical_parent_uuid: str | None = None
    """Only written for compact boundaries (R7.8)."""
    with_logical_parent: bool = False
    team_name: str | None = None
    agent_name: str | None = None
    prompt_id: str | None = None
    """Written on user lines only."""
    agent_id: str | None = None


def build_line(message_wire: JsonObject, chain: ChainFields, stamp: dict[str, JsonValue | None]) -> JsonObject:
    """R7.3: assemble one message line (see the module docstring for the merge semantics). A writer of many
    lines with the same batch fields makes one :class:`LineTemplate` and asks it for each line."""
    return LineTemplate(chain, stamp).line(
        message_wire, chain.parent_uuid, chain.logical_parent_uuid, with_logical_parent=chain.with_logical_parent
    )


class LineTemplate:
    """:func:`build_line` with what is the same for every line of a write batch worked out once: the chain
    fields that do not depend on the message (sidechain flag, team, agent id) and the stamp split into the
    keys it sets and the keys it removes. The lines are the same, key for key and in the same order.

    Why: a write batch is a few lines of one session; a :class:`ChainFields` per line (a frozen dataclass:
    one ``object.__setattr__`` per field) and re-filtering the stamp for every line were a visible share of
    the transcript worker's CPU per log entry (issue 31)."""

    __slots__ = ("_after_prompt", "_before_prompt", "_is_sidechain", "_prompt_id", "_stamp_removed", "_stamp_set")

    def __init__(self, chain: ChainFields, stamp: dict[str, JsonValue | None]) -> None:
        self._is_sidechain = chain.is_sidechain
        self._before_prompt: dict[str, JsonValue | None] = {}
        if chain.team_name is not None:
            self._before_prompt["teamName"] = chain.team_name
        if chain.agent_name is not None:
            self._before_prompt["agentName"] = chain.agent_name
        self._prompt_id = chain.prompt_id
        self._after_prompt: dict[str, JsonValue | None] = {}
        if chain.agent_id is not None:
            self._after_prompt["agentId"] = chain.agent_id
        # A stamp value of None removes its key (also one the message carries): set the others, then delete.
        self._stamp_set = {key: value for key, value in stamp.items() if value is not None}
        self._stamp_removed = tuple(key for key, value in stamp.items() if value is None)

    def line(
        self,
        message_wire: JsonObject,
        parent_uuid: str | None,
        logical_parent_uuid: str | None = None,
        *,
        with_logical_parent: bool = False,
    ) -> JsonObject:
        """R7.3: one message line, as ``build_line`` with a :class:`ChainFields` of this template's batch
        fields and these (``logicalParentUuid`` only ``with_logical_parent``: compact boundaries, R7.8)."""
        line: dict[str, JsonValue | None] = {"parentUuid": parent_uuid}
        if with_logical_parent:
            line["logicalParentUuid"] = logical_parent_uuid
        line["isSidechain"] = self._is_sidechain
        if self._before_prompt:
            line.update(self._before_prompt)
        if self._prompt_id is not None and message_wire.get("type") == "user":
            line["promptId"] = self._prompt_id
        if self._after_prompt:
            line.update(self._after_prompt)
        # The message's own fields, Claude Code's first fields first: a key already in ``line`` keeps its place.
        for key in _OWN_FIELDS_FIRST:
            if key in message_wire:
                line[key] = message_wire[key]
        line.update(message_wire)
        if _IN_MEMORY_PARENT in message_wire or _IN_MEMORY_SIDECHAIN in message_wire:
            # R7.19: chain fields a message still carries (read from another transcript) are reassigned.
            line["parentUuid"] = parent_uuid
            line["isSidechain"] = self._is_sidechain
        line.update(self._stamp_set)
        for key in self._stamp_removed:
            line.pop(key, None)
        return line


def dumps_line(line: JsonValue) -> str:
    """Compact JSON like ``JSON.stringify``: no spaces, non-ASCII as is, key order kept.

    orjson is the fast path; the stdlib handles what orjson refuses (integers over 64 bits, lone
    surrogates, which are escaped as ``\\udXXX`` just as JavaScript does).
    """
    try:
        return orjson.dumps(line).decode("utf-8")
    except (orjson.JSONEncodeError, TypeError):
        text = json.dumps(line, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return json.dumps(line, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
        return text
