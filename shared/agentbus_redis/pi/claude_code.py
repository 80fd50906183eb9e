"""P10: pi ↔ Claude Code, line by line, on the wire objects of both formats.

Every pi entry becomes one Claude Code transcript line and back. The mapping itself is the natural one
of P10.1–P10.3 (blocks, usage, stop reasons, tool results as ``tool_result`` user lines, failed turns as
synthetic API-error assistants); whatever it cannot carry (P10.5: ids, ``api``/``provider``, costs,
signatures of other providers, ``details``, model and thinking changes, compactions, branch summaries,
labels, custom entries) is **kept aside** on the Claude Code line under the ``pi`` key, holding only what
the natural mapping back does not reproduce. So pi → Claude Code → pi is lossless (JSON-equal), and a
Claude Code line without a ``pi`` key maps to pi by the natural mapping alone.

What each pi entry becomes (and what is kept aside for it):

- ``message`` user → ``user`` line (text, base64 image); the message's ms timestamp, unknown fields.
- ``message`` assistant → one ``assistant`` line with every block (``message.id`` ``msg_pi_<id>``); back,
  the per-block lines of one Claude Code reply (one ``message.id``) become one pi assistant message;
  ``api``, ``provider``, usage cost and total, signatures of other providers.
- ``message`` assistant with ``stopReason`` ``error``/``aborted`` → a synthetic API error (``<synthetic>``,
  ``isApiErrorMessage``, ``API Error: <errorMessage>``), which requests drop as pi does (R4.4, P5.6 b);
  its partial content and everything else.
- ``message`` toolResult → ``user`` line with one ``tool_result`` (``toolUseResult`` = ``details``,
  ``sourceToolAssistantUUID`` = the call's line); ``toolName`` only if it is not the call's name.
- ``message`` bashExecution → ``user`` line with ``bashExecutionToText`` (P4.4), ``isMeta`` when excluded
  from the context; the structured fields.
- ``message`` custom, ``custom_message`` → ``user`` line with the content; type, display, details.
- every other entry (model and thinking changes, compactions, branch summaries, labels, custom state, …)
  → a ``system`` line of subtype ``pi_entry`` (never sent, R4.4); the whole entry.

The header rides on the first line. A Claude Code resume of a converted file walks the same tree; it does
not apply pi's compaction cut (P8.6), which only a pi reader of the original (or converted-back) file does.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from agentbus_redis.pi.constants import FAILED_STOP_REASONS, REASONING_REDACTED
from agentbus_redis.pi.context import iso_to_ms
from agentbus_redis.pi.convert import bash_execution_to_text
from agentbus_redis.pi.messages import PiBashExecution

JsonDict = dict[str, Any]

STASH = "pi"
"""The Claude Code line key holding what the natural mapping does not carry."""
PI_ENTRY_SUBTYPE = "pi_entry"
"""Subtype of the ``system`` line standing for a pi entry with no Claude Code equivalent."""
SYNTHETIC_MODEL = "<synthetic>"
API_ERROR_PREFIX = "API Error: "
ANTHROPIC_API = "anthropic-messages"
ANTHROPIC_PROVIDER = "anthropic"
CLAUDE_CODE_STASH = "claudeCode"
"""The pi entry key holding the Claude Code lines an entry was converted from (pi ignores unknown entry
keys); converting back gives those lines again."""
CLAUDE_CODE_CUSTOM_TYPE = "claude-code"
"""``customType`` of the pi ``custom`` entry that carries a Claude Code line with no pi equivalent."""

_NAMESPACE = uuid.UUID("5b1f0c1e-8d3a-4f7e-9a51-2c0d7e6b9a10")

STOP_REASON_TO_CLAUDE_CODE = {"stop": "end_turn", "length": "max_tokens", "toolUse": "tool_use"}
"""P10.3."""
STOP_REASON_TO_PI = {
    "end_turn": "stop",
    "pause_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "toolUse",
    "refusal": "error",
}
"""P10.3 (P3.7)."""


def claude_code_uuid(session_id: str, entry_id: str) -> str:
    """A stable UUID for a pi entry id (Claude Code lines are keyed by UUIDs, P10.1)."""
    return str(uuid.uuid5(_NAMESPACE, f"{session_id}/{entry_id}"))


def ms_to_iso(ms: int | float) -> str:
    """Epoch milliseconds as Claude Code's ISO timestamp (``…Z``, milliseconds)."""
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


# -- blocks ---------------------------------------------------------------------------------------------


def block_to_claude_code(block: JsonDict) -> JsonDict:
    """P10.1: one pi block as an Anthropic block (unknown types pass through as they are)."""
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": block.get("text", "")}
    if kind == "image":
        source = {"type": "base64", "media_type": block.get("mimeType"), "data": block.get("data")}
        return {"type": "image", "source": source}
    if kind == "thinking":
        if block.get("redacted"):
            return {"type": "redacted_thinking", "data": block.get("thinkingSignature", "")}
        return {"type": "thinking", "thinking": block.get("thinking", ""), "signature": block.get("thinkingSignature")}
    if kind == "toolCall":
        return {"type": "tool_use", "id": block.get("id"), "name": block.get("name"), "input": block.get("arguments")}
    return dict(block)


def block_to_pi(block: JsonDict) -> JsonDict:
    """P10.1 back: one Anthropic block as a pi block."""
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": block.get("text", "")}
    if kind == "image" and isinstance(block.get("source"), dict):
        source = block["source"]
        return {"type": "image", "data": source.get("data"), "mimeType": source.get("media_type")}
    if kind == "redacted_thinking":
        return {
            "type": "thinking",
            "thinking": REASONING_REDACTED,
            "thinkingSignature": block.get("data"),
            "redacted": True,
        }
    if kind == "thinking":
        signature = block.get("signature")
        return {"type": "thinking", "thinking": block.get("thinking", "")} | (
            {} if signature is None else {"thinkingSignature": signature}
        )
    if kind == "tool_use":
        return {"type": "toolCall", "id": block.get("id"), "name": block.get("name"), "arguments": block.get("input")}
    return dict(block)


def content_to_claude_code(content: Any) -> Any:
    return [block_to_claude_code(block) for block in content] if isinstance(content, list) else content


def content_to_pi(content: Any) -> Any:
    """A non-object element of a content list (a malformed line) passes through as it is."""
    if not isinstance(content, list):
        return content
    return [block_to_pi(block) if isinstance(block, dict) else block for block in content]


# -- usage and stop reasons -------------------------------------------------------------------------------


def usage_to_claude_code(usage: JsonDict | None) -> JsonDict:
    """P10.2."""
    usage = usage or {}
    return {
        "input_tokens": usage.get("input", 0),
        "output_tokens": usage.get("output", 0),
        "cache_read_input_tokens": usage.get("cacheRead", 0),
        "cache_creation_input_tokens": usage.get("cacheWrite", 0),
    }


def usage_to_pi(usage: JsonDict | None) -> JsonDict:
    """P10.2 back; ``totalTokens`` is the sum (P3.2), cost is not known without a price table."""
    usage = usage or {}
    counts = {
        "input": usage.get("input_tokens") or 0,
        "output": usage.get("output_tokens") or 0,
        "cacheRead": usage.get("cache_read_input_tokens") or 0,
        "cacheWrite": usage.get("cache_creation_input_tokens") or 0,
    }
    return {**counts, "totalTokens": sum(counts.values())}


# -- what is kept aside -------------------------------------------------------------------------------------


def _difference(original: JsonDict, natural: JsonDict) -> JsonDict:
    """The keys of ``original`` that ``natural`` does not reproduce, and the keys it adds (``_absent``)."""
    kept = {key: value for key, value in original.items() if key not in natural or natural[key] != value}
    absent = [key for key in natural if key not in original]
    return kept | ({"_absent": absent} if absent else {})


def _apply(natural: JsonDict, kept: JsonDict | None) -> JsonDict:
    if not kept:
        return natural
    restored = {key: value for key, value in natural.items() if key not in kept.get("_absent", ())}
    restored.update({key: value for key, value in kept.items() if key != "_absent"})
    return restored


# -- pi → Claude Code ---------------------------------------------------------------------------------------


class _LineContext:
    """What mapping one entry needs from the rest of the session."""

    def __init__(self, header: JsonDict, entries: Sequence[JsonDict]) -> None:
        self.session_id = str(header.get("id", ""))
        self.cwd = header.get("cwd")
        self.call_owner: dict[str, str] = {}
        self.call_name: dict[str, str] = {}
        for entry in entries:
            message = entry.get("message")
            if entry.get("type") != "message" or not isinstance(message, dict) or message.get("role") != "assistant":
                continue
            # A failed turn's calls are not on its Claude Code line (a synthetic API error): the mapping back
            # does not know their names either, so they are kept aside like any lossy field.
            visible = message.get("stopReason") not in FAILED_STOP_REASONS
            for block in message.get("content") or []:
                if isinstance(block, dict) and block.get("type") == "toolCall" and isinstance(block.get("id"), str):
                    self.call_owner[block["id"]] = str(entry.get("id"))
                    if visible:
                        self.call_name[block["id"]] = str(block.get("name"))

    def uuid_of(self, entry_id: Any) -> str | None:
        return claude_code_uuid(self.session_id, str(entry_id)) if entry_id is not None else None


def _natural_message_line(message: JsonDict, entry_id: str, context: _LineContext) -> JsonDict:
    """The Claude Code line a pi message naturally maps to (without envelope)."""
    role = message.get("role")
    if role == "assistant":
        failed = message.get("stopReason") in FAILED_STOP_REASONS
        payload: JsonDict = {
            "id": f"msg_pi_{entry_id}",
            "type": "message",
            "role": "assistant",
            "model": SYNTHETIC_MODEL if failed else message.get("model", ""),
            "content": (
                [{"type": "text", "text": API_ERROR_PREFIX + (message.get("errorMessage") or message["stopReason"])}]
                if failed
                else content_to_claude_code(message.get("content", []))
            ),
            "stop_reason": None if failed else STOP_REASON_TO_CLAUDE_CODE.get(message.get("stopReason", "")),
            "stop_sequence": None,
            "usage": usage_to_claude_code(message.get("usage")),
        }
        return {"type": "assistant", "message": payload} | ({"isApiErrorMessage": True} if failed else {})
    if role == "toolResult":
        call_id = message.get("toolCallId")
        result = {
            "type": "tool_result",
            "tool_use_id": call_id,
            "content": content_to_claude_code(message.get("content")),
            "is_error": bool(message.get("isError")),
        }
        line: JsonDict = {"type": "user", "message": {"role": "user", "content": [result]}}
        if "details" in message:
            line["toolUseResult"] = message["details"]
        owner = context.call_owner.get(str(call_id))
        if owner is not None:
            line["sourceToolAssistantUUID"] = context.uuid_of(owner)
        return line
    if role == "bashExecution":
        text = bash_execution_to_text_of(message)
        line = {"type": "user", "message": {"role": "user", "content": [{"type": "text", "text": text}]}}
        return line | ({"isMeta": True} if message.get("excludeFromContext") else {})
    content = message.get("content", "")
    if role == "custom" and isinstance(content, str):
        content = [{"type": "text", "text": content}]
    return {"type": "user", "message": {"role": "user", "content": content_to_claude_code(content)}}


def bash_execution_to_text_of(message: JsonDict) -> str:
    """P4.4 on a wire object."""
    return bash_execution_to_text(PiBashExecution.model_validate(message, by_alias=True, by_name=False))


def _entry_line(entry: JsonDict, context: _LineContext) -> tuple[JsonDict, JsonDict | None]:
    """The Claude Code line of one entry, without envelope, and the message it maps back to (if any)."""
    message = entry.get("message")
    mapped_roles = {"user", "assistant", "toolResult", "bashExecution", "custom"}
    if entry.get("type") == "message" and isinstance(message, dict) and message.get("role") in mapped_roles:
        return _natural_message_line(message, str(entry.get("id")), context), message
    if entry.get("type") == "custom_message":
        as_message = {"role": "custom", "content": entry.get("content", "")}
        return _natural_message_line(as_message, str(entry.get("id")), context), None
    description = f"pi {entry.get('type')} entry"
    return {"type": "system", "subtype": PI_ENTRY_SUBTYPE, "content": description, "level": "info"}, None


def entry_to_claude_code(entry: JsonDict, context: _LineContext) -> JsonDict:
    """One pi entry as one Claude Code line; what the natural mapping back misses goes under ``pi``."""
    body, message = _entry_line(entry, context)
    timestamp = entry.get("timestamp")
    if not isinstance(timestamp, str) and isinstance(message, dict) and isinstance(message.get("timestamp"), int):
        timestamp = ms_to_iso(message["timestamp"])
    line: JsonDict = {
        "parentUuid": context.uuid_of(entry.get("parentId")),
        "isSidechain": False,
        **body,
        "uuid": context.uuid_of(entry.get("id")),
        "timestamp": timestamp or "1970-01-01T00:00:00.000Z",
        "sessionId": context.session_id,
    }
    if context.cwd is not None:
        line["cwd"] = context.cwd
    natural = claude_code_to_pi_entries(line, context.call_name)
    stash = _stash(entry, natural)
    return line | ({STASH: stash} if stash else {})


def _stash(entry: JsonDict, natural: list[JsonDict]) -> JsonDict:
    """``whole`` when the natural mapping back is not one entry of the same type, else the differences of
    the entry (``entry``) and of its message (``message``)."""
    if len(natural) != 1 or natural[0].get("type") != entry.get("type"):
        return {"whole": entry}
    mapped = natural[0]
    stash: JsonDict = {}
    entry_kept = _difference(_without(entry, "message"), _without(mapped, "message"))
    if entry_kept:
        stash["entry"] = entry_kept
    if isinstance(entry.get("message"), dict):
        message_kept = _difference(entry["message"], mapped.get("message") or {})
        if message_kept:
            stash["message"] = message_kept
    return stash


def _without(obj: JsonDict, key: str) -> JsonDict:
    return {name: value for name, value in obj.items() if name != key}


def session_to_claude_code(header: JsonDict, entries: Sequence[JsonDict]) -> list[JsonDict]:
    """A whole pi session (header + entries, as wire objects) as Claude Code transcript lines; the header
    rides on the first line (or on a ``pi_entry`` line of its own when the session has no entries). An
    entry converted from Claude Code gives back the lines it was made from (:data:`CLAUDE_CODE_STASH`, or a
    ``claude-code`` custom entry's line)."""
    context = _LineContext(header, entries)
    lines: list[JsonDict] = []
    for entry in entries:
        kept = entry.get(CLAUDE_CODE_STASH)
        if isinstance(kept, dict) and isinstance(kept.get("lines"), list):
            lines.extend(line for line in kept["lines"] if isinstance(line, dict))
        elif isinstance(kept, dict) and kept.get("part") is True:
            continue
        elif (
            entry.get("type") == "custom"
            and entry.get("customType") == CLAUDE_CODE_CUSTOM_TYPE
            and isinstance(entry.get("data"), dict)
        ):
            lines.append(entry["data"])
        else:
            lines.append(entry_to_claude_code(entry, context))
    if lines:
        lines[0] = lines[0] | {STASH: {**lines[0].get(STASH, {}), "header": header}}
    return lines


# -- Claude Code → pi ---------------------------------------------------------------------------------------


def _natural_assistant(line: JsonDict) -> JsonDict:
    payload = line.get("message") or {}
    if line.get("isApiErrorMessage") and payload.get("model") == SYNTHETIC_MODEL:
        texts = [b.get("text", "") for b in payload.get("content") or [] if isinstance(b, dict)]
        text = "".join(texts)
        error = text.removeprefix(API_ERROR_PREFIX) if text.startswith(API_ERROR_PREFIX) else text
        return {
            "role": "assistant",
            "content": [],
            "api": ANTHROPIC_API,
            "provider": ANTHROPIC_PROVIDER,
            "model": payload.get("model", ""),
            "usage": usage_to_pi(payload.get("usage")),
            "stopReason": "error",
            "errorMessage": error,
        }
    content = payload.get("content", [])
    blocks = content_to_pi(content if isinstance(content, list) else [{"type": "text", "text": content}])
    has_calls = any(block.get("type") == "toolCall" for block in blocks)
    stop = STOP_REASON_TO_PI.get(payload.get("stop_reason") or "", "toolUse" if has_calls else "stop")
    return {
        "role": "assistant",
        "content": blocks,
        "api": ANTHROPIC_API,
        "provider": ANTHROPIC_PROVIDER,
        "model": payload.get("model", ""),
        "usage": usage_to_pi(payload.get("usage")),
        "stopReason": stop,
    }


def _natural_user(line: JsonDict, call_name: dict[str, str]) -> list[JsonDict]:
    """A user line: its tool results become toolResult messages, the rest one user message (P10.1)."""
    content = (line.get("message") or {}).get("content", "")
    timestamp = iso_to_ms(line.get("timestamp"))
    if isinstance(content, str):
        return [{"role": "user", "content": content, "timestamp": timestamp}]
    messages: list[JsonDict] = []
    rest: list[JsonDict] = []
    for block in content:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            result_content = block.get("content")
            if isinstance(result_content, str):
                result_content = [{"type": "text", "text": result_content}]
            result: JsonDict = {
                "role": "toolResult",
                "toolCallId": block.get("tool_use_id"),
                "toolName": call_name.get(str(block.get("tool_use_id")), ""),
                "content": content_to_pi(result_content or []),
            }
            if "toolUseResult" in line:
                result["details"] = line["toolUseResult"]
            messages.append(result | {"isError": bool(block.get("is_error")), "timestamp": timestamp})
        else:
            rest.append(block)
    if rest or not messages:
        messages.append({"role": "user", "content": content_to_pi(rest), "timestamp": timestamp})
    return messages


def natural_pi_entries(line: JsonDict, call_name: dict[str, str]) -> list[JsonDict]:
    """P10.1 back, without what was kept aside: a user line holding several results gives several
    entries; a line pi has no message for (system, progress, attachment, …) a ``custom`` entry."""
    base = {"id": line.get("uuid"), "parentId": line.get("parentUuid"), "timestamp": line.get("timestamp")}
    kind = line.get("type")
    if kind in {"user", "assistant"} and not isinstance(line.get("message"), dict):
        kind = None  # a line no model reads (its message is not an object): kept whole as a custom entry
    if kind == "assistant":
        messages = [_natural_assistant(line) | {"timestamp": iso_to_ms(line.get("timestamp"))}]
    elif kind == "user":
        messages = _natural_user(line, call_name)
    else:
        return [{"type": "custom", "customType": CLAUDE_CODE_CUSTOM_TYPE, "data": _without(line, STASH), **base}]
    entries: list[JsonDict] = []
    for index, message in enumerate(messages):
        entry_base = base if index == 0 else base | {"id": f"{base['id']}.{index}", "parentId": entries[-1]["id"]}
        entries.append({"type": "message", **entry_base, "message": message})
    return entries


def claude_code_to_pi_entries(line: JsonDict, call_name: dict[str, str] | None = None) -> list[JsonDict]:
    """One Claude Code line as pi entries; a line with a ``pi`` key gives back exactly the entry it was
    made from."""
    stash = line.get(STASH) or {}
    if "whole" in stash:
        return [stash["whole"]]
    natural = natural_pi_entries(line, call_name or {})
    if len(natural) != 1 or not ({"entry", "message"} & stash.keys()):
        return natural
    restored = _apply(_without(natural[0], "message"), stash.get("entry"))
    if "message" in natural[0]:
        restored["message"] = _apply(natural[0]["message"], stash.get("message"))
    return [restored]


class ClaudeCodeToPi:
    """Claude Code lines → pi entries one line at a time, as a log is read or a transcript appended: tool
    names are remembered from the ``tool_use`` blocks seen so far (a result names its call's tool, P10.1),
    an entry whose parent is a line that became several entries (a user line with several tool results)
    hangs on the last of them, and a result line Claude Code hangs on its call's assistant (parallel
    results as siblings, a late result beside the message written before it) hangs on the entry mapped
    just before it, as pi appends results in file order, and a line off the chain (no ``uuid``) hangs on
    the last entry; so pi's path walk (P8.2) passes through every result and every message written
    between a call and its result."""

    def __init__(self) -> None:
        self.call_name: dict[str, str] = {}
        self.last_entry_of: dict[str, str] = {}
        self.assistant_uuids: set[str] = set()
        self.last_id: str | None = None
        """The id of the entry mapped last (file order)."""

    def remember_calls(self, line: JsonDict) -> None:
        content = (line.get("message") or {}).get("content") if isinstance(line.get("message"), dict) else None
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_use" and isinstance(block.get("id"), str):
                self.call_name[block["id"]] = str(block.get("name"))

    def entries(self, line: JsonDict) -> list[JsonDict]:
        self.remember_calls(line)
        entries = claude_code_to_pi_entries(line, self.call_name)
        if entries and STASH not in line:
            entries[0] = entries[0] | self._placement(line, entries[0])
            uuid_ = line.get("uuid")
            if len(entries) > 1 and isinstance(uuid_, str) and isinstance(entries[-1].get("id"), str):
                self.last_entry_of[uuid_] = entries[-1]["id"]
            if line.get("type") == "assistant" and isinstance(uuid_, str):
                self.assistant_uuids.add(uuid_)
        if entries and isinstance(entries[-1].get("id"), str):
            self.last_id = entries[-1]["id"]
        return entries

    def _placement(self, line: JsonDict, first: JsonDict) -> JsonDict:
        """The ``id``/``parentId`` changes that keep the first entry of ``line`` on pi's path."""
        parent = first.get("parentId")
        if isinstance(parent, str) and parent in self.last_entry_of:
            return {"parentId": self.last_entry_of[parent]}
        if parent in self.assistant_uuids and _holds_tool_result(line) and self.last_id is not None:
            return {"parentId": self.last_id}
        if first.get("id") is None and self.last_id is not None:
            # A line off Claude Code's chain (metadata: summary, custom-title…) is appended to the leaf, as
            # pi appends every entry, so the last line in file order still leads to the conversation.
            return {"id": f"{self.last_id}+", "parentId": self.last_id}
        return {}


def _holds_tool_result(line: JsonDict) -> bool:
    payload = line.get("message")
    content = payload.get("content") if isinstance(payload, dict) else None
    return line.get("type") == "user" and any(
        isinstance(block, dict) and block.get("type") == "tool_result" for block in content or []
    )


def new_pi_header(session_id: str, *, timestamp: str | None, cwd: str | None) -> JsonDict:
    """A v3 session header (P7.4) for a session that did not start as a pi file."""
    return {"type": "session", "version": 3, "id": session_id, "timestamp": timestamp, "cwd": cwd}


def _is_reply_line(line: JsonDict) -> bool:
    """A Claude Code assistant line of a model reply (not one converted from pi, which is a whole message
    already, nor a synthetic API error), with the ``message.id`` its reply's other lines share."""
    payload = line.get("message")
    return (
        line.get("type") == "assistant"
        and STASH not in line
        and not line.get("isApiErrorMessage")
        and isinstance(line.get("uuid"), str)
        and isinstance(payload, dict)
        and isinstance(payload.get("id"), str)
        and isinstance(payload.get("content"), list)
    )


def _merge_reply_groups(lines: Iterable[JsonDict]) -> list[tuple[JsonDict, list[JsonDict]]]:
    """:func:`merge_reply_lines`, each merged line with the lines it was made from."""
    merged: list[tuple[JsonDict, list[JsonDict]]] = []
    head_of_reply: dict[str, int] = {}
    merged_into: dict[str, str] = {}
    for line in lines:
        if _is_reply_line(line):
            reply_id = line["message"]["id"]
            head = head_of_reply.get(reply_id)
            if head is not None:
                first, sources = merged[head]
                payload = {**first["message"], "content": [*first["message"]["content"], *line["message"]["content"]]}
                for key in ("stop_reason", "stop_sequence", "usage"):
                    if key in line["message"]:
                        payload[key] = line["message"][key]
                merged[head] = (first | {"message": payload}, [*sources, line])
                merged_into[line["uuid"]] = first["uuid"]
                continue
            head_of_reply[reply_id] = len(merged)
        parent = line.get("parentUuid")
        moved = isinstance(parent, str) and parent in merged_into
        merged.append((line | {"parentUuid": merged_into[str(parent)]} if moved else line, [line]))
    return merged


def merge_reply_lines(lines: Iterable[JsonDict]) -> list[JsonDict]:
    """P10.1: Claude Code writes a reply as one line per content block (R9), each with the reply's
    ``message.id``; pi holds a reply as ONE assistant message, and sends each of its messages as one API
    message. So the lines of one ``message.id`` become the first one's line holding every block in file
    order (thinking and its signature included), with the last line's stop reason and usage; a line that
    hung on a merged line hangs on the one it was merged into. (Mapped line by line, pi would send each
    parallel call as its own assistant message, answer the ones without an adjacent result with its own
    "No result provided" error, and send the real results after them: a request the API refuses.)"""
    return [line for line, _ in _merge_reply_groups(lines)]


def _first_field(lines: Sequence[JsonDict], key: str) -> Any:
    """The first string value of ``key`` on a line (metadata lines at the top carry no cwd or session)."""
    return next((line[key] for line in lines if isinstance(line.get(key), str)), None)


def claude_code_to_session(lines: Iterable[JsonDict], *, cwd: str | None = None) -> tuple[JsonDict, list[JsonDict]]:
    """Claude Code lines as a pi session: the header kept aside on the first line, or a new v3 one naming the
    session's working directory (``cwd``, else the first ``cwd`` of the lines: pi opens a session only in a
    directory that exists). A reply's per-block lines become one pi assistant message (:func:`merge_reply_lines`)."""
    groups = _merge_reply_groups(lines)
    materialized = [line for line, _ in groups]
    mapping = ClaudeCodeToPi()
    for line in materialized:
        mapping.remember_calls(line)
    header = (materialized[0].get(STASH) or {}).get("header") if materialized else None
    if header is None:
        header = new_pi_header(
            _first_field(materialized, "sessionId") or "claude-code-session",
            timestamp=_first_field(materialized, "timestamp"),
            cwd=cwd if cwd is not None else _first_field(materialized, "cwd"),
        )
    elif cwd is not None:
        header = header | {"cwd": cwd}
    entries: list[JsonDict] = []
    for line, sources in groups:
        mapped = mapping.entries(line)
        if mapped and STASH not in line:
            # The Claude Code lines kept aside (on the first entry; the others it split into are marked), so
            # converting back gives them again: Claude Code → pi → Claude Code keeps every line as it was.
            mapped = [mapped[0] | {CLAUDE_CODE_STASH: {"lines": sources}}] + [
                entry | {CLAUDE_CODE_STASH: {"part": True}} for entry in mapped[1:]
            ]
        entries.extend(mapped)
    return header, entries
