"""``LineTemplate.line`` (and ``build_line``, which asks it) builds the line R7.3 describes: the reference below is
the straightforward merge the transcript writer used before the template (same keys, same order, same values)."""

from __future__ import annotations

import itertools

import orjson
import pytest

from agentbus_redis.json_types import JsonObject, JsonValue
from agentbus_redis.transcript_files.lines import (
    _OWN_FIELDS_FIRST,
    IN_MEMORY_ONLY_FIELDS,
    ChainFields,
    LineTemplate,
    build_line,
)


def reference_line(message_wire: JsonObject, chain: ChainFields, stamp: dict[str, JsonValue | None]) -> JsonObject:
    """The chain fields, then the message's own (Claude Code's first fields first, its chain fields dropped: R7.19),
    then the stamp (a None value removes its key)."""
    line: dict[str, JsonValue | None] = {"parentUuid": chain.parent_uuid}
    if chain.with_logical_parent:
        line["logicalParentUuid"] = chain.logical_parent_uuid
    line["isSidechain"] = chain.is_sidechain
    if chain.team_name is not None:
        line["teamName"] = chain.team_name
    if chain.agent_name is not None:
        line["agentName"] = chain.agent_name
    if chain.prompt_id is not None and message_wire.get("type") == "user":
        line["promptId"] = chain.prompt_id
    if chain.agent_id is not None:
        line["agentId"] = chain.agent_id
    own = {key: message_wire[key] for key in _OWN_FIELDS_FIRST if key in message_wire}
    own.update(message_wire)
    for key in IN_MEMORY_ONLY_FIELDS:
        own.pop(key, None)
    line.update(own)
    line.update(stamp)
    for key in [key for key, value in stamp.items() if value is None]:
        del line[key]
    return line


WIRES: list[JsonObject] = [
    {"uuid": "u1", "timestamp": "t", "type": "user", "message": {"role": "user", "content": "hi"}},
    {"type": "assistant", "message": {"id": "m"}, "uuid": "u2", "timestamp": "t", "requestId": "r"},
    {"type": "system", "subtype": "compact_boundary", "uuid": "u3", "timestamp": "t", "content": "c"},
    # Chain fields of another transcript (R7.19: dropped, reassigned) and stamp keys of its own (stamp wins).
    {"parentUuid": "old", "isSidechain": True, "type": "user", "uuid": "u4", "cwd": "/elsewhere", "slug": "s"},
    {"gitBranch": "feature", "type": "attachment", "uuid": "u5", "isSidechain": False},
]
STAMPS: list[dict[str, JsonValue | None]] = [
    {"userType": "external", "entrypoint": None, "cwd": "/srv", "sessionId": "s", "gitBranch": None, "slug": None},
    {"userType": "external", "entrypoint": "cli", "cwd": "/srv", "sessionId": "s", "gitBranch": "main", "slug": "x"},
]
BATCH_CHAINS = [
    ChainFields(parent_uuid=None, is_sidechain=False),
    ChainFields(parent_uuid=None, is_sidechain=True, team_name="t", agent_name="a", prompt_id="p", agent_id="ag"),
    ChainFields(parent_uuid=None, is_sidechain=False, prompt_id="p"),
]


@pytest.mark.parametrize(("wire", "stamp", "batch_chain"), list(itertools.product(WIRES, STAMPS, BATCH_CHAINS)))
@pytest.mark.parametrize(
    ("parent", "logical", "boundary"), [("p1", None, False), (None, "p0", True), (None, None, True)]
)
def test_line_template_matches_build_line(
    wire: JsonObject,
    stamp: dict[str, JsonValue | None],
    batch_chain: ChainFields,
    parent: str | None,
    logical: str | None,
    boundary: bool,
) -> None:
    chain = ChainFields(
        parent_uuid=parent,
        logical_parent_uuid=logical,
        with_logical_parent=boundary,
        is_sidechain=batch_chain.is_sidechain,
        team_name=batch_chain.team_name,
        agent_name=batch_chain.agent_name,
        prompt_id=batch_chain.prompt_id,
        agent_id=batch_chain.agent_id,
    )
    expected = reference_line(dict(wire), chain, stamp)
    line = LineTemplate(batch_chain, stamp).line(dict(wire), parent, logical, with_logical_parent=boundary)
    assert orjson.dumps(line) == orjson.dumps(expected)  # the bytes: key order included
    assert list(line) == list(expected)
    assert orjson.dumps(build_line(dict(wire), chain, stamp)) == orjson.dumps(expected)
