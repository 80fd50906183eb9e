"""Comparing a request agentbus builds with the one a client sent, and running ``agentbus`` on client files.

What is compared: ``messages``, every role (``role: "system"`` messages included) and every field. Left
aside, as the issue says: the system prompt and the tool list (not part of ``messages``). One client-side
device is read through: ``cache_control`` (prompt caching; agentbus sends none, ``agentbus normalize``
prints none) is dropped, and where the client put it on the single text block of a message that agentbus
sends as a string — the client turns the string into a block only to carry the marker — both forms are
the same content.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from tests.cli.process import AGENTBUS, Outcome, agentbus, cli_env

JsonObject = dict[str, Any]


def without_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: without_cache_control(item) for key, item in value.items() if key != "cache_control"}
    if isinstance(value, list):
        return [without_cache_control(item) for item in value]
    return value


def _cache_marked_text(message: JsonObject) -> str | None:
    """The text of a message whose content is one cache-marked text block (else ``None``)."""
    content = message.get("content")
    if isinstance(content, list) and len(content) == 1 and isinstance(content[0], dict):
        block = content[0]
        if set(block) == {"type", "text", "cache_control"} and block["type"] == "text":
            return str(block["text"])
    return None


def client_messages_as_agentbus_reads_them(client: list[JsonObject], ours: list[JsonObject]) -> list[JsonObject]:
    """``client`` without ``cache_control``; a cache-marked single text block in the form ``ours`` has at
    that place (a string or one plain block)."""
    read: list[JsonObject] = []
    for index, message in enumerate(client):
        text = _cache_marked_text(message)
        mine = ours[index] if index < len(ours) else None
        if text is not None and mine is not None and isinstance(mine.get("content"), str):
            read.append({**without_cache_control(message), "content": text})
        else:
            read.append(without_cache_control(message))
    return read


def first_difference(client: list[JsonObject], ours: list[JsonObject]) -> str:
    """Where two message lists part, for an assertion message."""
    for index, (theirs, mine) in enumerate(zip(client, ours, strict=False)):
        if theirs != mine:
            return (
                f"messages[{index}] differ:\n  client:   {json.dumps(theirs, sort_keys=True)[:1500]}\n"
                f"  agentbus: {json.dumps(mine, sort_keys=True)[:1500]}"
            )
    return f"lengths differ: client {len(client)}, agentbus {len(ours)}"


def run_agentbus(*args: str, cwd: Path) -> Outcome:
    return agentbus(*args, cwd=cwd, env=cli_env(), timeout_s=120)


def normalize(path: Path, *args: str, cwd: Path) -> tuple[list[JsonObject], Outcome]:
    """``agentbus normalize PATH ARGS``: the printed messages and the outcome. Run once per file and
    arguments in a test session (the files are fixed once made; several tests read the same request)."""
    outcome = _normalize_once(str(path), args, str(cwd.parent))
    assert outcome.code == 0, f"{' '.join(AGENTBUS)} normalize {path} {args}: {outcome.stderr}"
    return list(json.loads(outcome.stdout)["messages"]), outcome


@functools.cache
def _normalize_once(path: str, args: tuple[str, ...], cwd: str) -> Outcome:
    return run_agentbus("normalize", path, *args, cwd=Path(cwd))
