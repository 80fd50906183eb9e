"""Hypothesis strategies: chaotic Claude Code histories built from real model objects.

:func:`chaos_histories` imitates how Claude Code writes a conversation (a reply split into one
assistant message per block sharing ``message.id``, one user message per tool_result, progress and
hooks interleaved, streaming-fallback tombstones) and then breaks it the ways real transcripts are
broken: missing, duplicated, orphaned, shuffled and delayed results, tool ids the API rejects,
unsigned thinking, blank text, synthetic API errors, virtual messages, compaction boundaries.

Alongside the messages it records what a correct normalizer must preserve: which tool_uses were
retracted, which tool_uses must survive, and which real result each surviving tool_use must keep.
Every tool_use carries a unique ``input["marker"]`` and every real result a unique text, so the
checks do not depend on how the normalizer rewrites ids.

:func:`pairing_inputs` generates user/assistant lists for
:func:`agentbus_redis.messages.pairing.ensure_tool_result_pairing`
alone, over a tiny id pool so duplicates and orphans are frequent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from hypothesis import strategies as st

from agentbus_redis.clock import FixedClock
from agentbus_redis.json_types import JsonObject
from agentbus_redis.messages.constants import INTERRUPT_MESSAGE_FOR_TOOL_USE, LOCAL_COMMAND_CAVEAT
from agentbus_redis.messages.content import (
    ContentBlock,
    DocumentBlock,
    ImageBlock,
    RedactedThinkingBlock,
    ServerToolResultBlock,
    ServerToolUseBlock,
    TextBlock,
    ThinkingBlock,
    ToolReferenceBlock,
    ToolResultBlock,
    ToolUseBlock,
    UnknownBlock,
)
from agentbus_redis.messages.factories import (
    create_assistant_api_error_message,
    create_attachment_message,
    create_compact_boundary_message,
    create_informational_message,
    create_local_command_message,
    create_progress_message,
)
from agentbus_redis.messages.kinds import (
    ApiMessage,
    AssistantMessage,
    AssistantPayload,
    Message,
    TombstoneMessage,
    UserMessage,
    UserPayload,
)
from agentbus_redis.messages.system import ApiErrorSystemMessage
from agentbus_redis.messages.tombstones import tombstones_for

_PNG = {
    "type": "base64",
    "media_type": "image/png",
    "data": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk",
}
IdFormat = Literal["valid", "dotted", "long_prefix_unique", "long_suffix_unique", "sanitized_twin"]
ResultFate = Literal[
    "normal", "missing", "duplicated", "delayed", "interleaved", "error", "error_with_image", "tool_reference"
]

TEXTS = st.sampled_from(["ok", "Let me look.", "", " ", "  \n\t", "trailing space  ", "done\n"])
"""Assistant/user text, blank and whitespace-only included (API §1.8)."""


class _Printer(Protocol):
    def text(self, obj: str) -> None: ...


@dataclass
class _Call:
    """One generated client tool_use and what must become of it."""

    marker: str
    tool_use_id: str
    message_uuid: str
    position: int
    """Index in the history of the assistant message holding the tool_use."""
    virtual: bool = False
    first_result: str | None = None
    """Text of the first real result placed in the history (the one pairing must keep)."""


@dataclass
class ChaosHistory:
    """A generated history and the facts the properties check against."""

    messages: tuple[Message, ...]
    retracted_markers: frozenset[str]
    """Markers of tool_uses that only existed in tombstoned messages: must never reach the API."""
    required_markers: frozenset[str]
    """Markers of tool_uses that must reach the API (live, non-virtual, after the last compact boundary)."""
    expected_results: dict[str, str]
    """Marker of a required tool_use → the text of the real result it must be answered with."""

    def __repr__(self) -> str:
        lines = [describe(message) for message in self.messages]
        return "ChaosHistory(\n  " + "\n  ".join(lines) + "\n)"

    def _repr_pretty_(self, printer: _Printer, cycle: bool) -> None:
        """Hypothesis prints falsifying examples with IPython-style pretty printing."""
        printer.text(repr(self))


def _short(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:37] + "...")


def describe_block(block: ContentBlock) -> str:
    """Compact one-block notation used in counterexample reports."""
    if isinstance(block, TextBlock):
        return f"text {_short(block.text)}"
    if isinstance(block, ToolUseBlock):
        marker = block.input.get("marker") if isinstance(block.input, dict) else None
        return f"tool_use {block.id} ({marker})"
    if isinstance(block, ToolResultBlock):
        content = block.content if isinstance(block.content, str) else [describe_block(b) for b in block.content or []]
        error = " is_error" if block.is_error else ""
        return f"tool_result {block.tool_use_id}{error} {content!r}"
    if isinstance(block, ThinkingBlock):
        return f"thinking sig={block.signature!r}"
    if isinstance(block, ServerToolUseBlock):
        return f"{block.type} {block.id}"
    if isinstance(block, ServerToolResultBlock):
        return f"{block.type} {block.tool_use_id}"
    return block.type


def describe(message: Message) -> str:
    """Compact one-line notation of a message used in counterexample reports."""
    if isinstance(message, UserMessage | AssistantMessage):
        content = message.message.content
        body = _short(content) if isinstance(content, str) else "[" + ", ".join(map(describe_block, content)) + "]"
        flags = "".join(f" {flag}" for flag, on in (("meta", message.is_meta), ("virtual", message.is_virtual)) if on)
        if isinstance(message, AssistantMessage):
            error = " api_error" if message.is_api_error_message else ""
            return f"{message.uuid[-4:]} A id={message.message.id}{flags}{error} {body}"
        return f"{message.uuid[-4:]} U{flags} {body}"
    if isinstance(message, TombstoneMessage):
        return f"TOMBSTONE of {getattr(message.message, 'uuid', '?')[-4:]}"
    kind = message.type
    detail = getattr(message, "subtype", None) or getattr(message, "attachment_type", None) or ""
    return f"{getattr(message, 'uuid', '????')[-4:]} {kind} {detail}".rstrip()


class _HistoryBuilder:
    """Appends messages and keeps the bookkeeping; every random choice goes through ``draw``."""

    def __init__(self, draw: st.DrawFn) -> None:
        self.draw = draw
        self.messages: list[Message] = []
        self.calls: dict[str, _Call] = {}
        self.retracted_uuids: set[str] = set()
        self.delayed: list[tuple[_Call, str]] = []
        self._serial = 0
        self._dotted: list[int] = []
        self.clock = FixedClock()

    # --- ids -------------------------------------------------------------------------------------

    def next_serial(self) -> int:
        self._serial += 1
        return self._serial

    def uuid(self) -> str:
        # Never collides with SequentialIds (…-4000-8000-…) used by the code under test.
        return f"10000000-0000-4000-9000-{self.next_serial():012x}"

    def tool_use_id(self) -> str:
        n = self.next_serial()
        id_format: IdFormat = self.draw(
            st.sampled_from(["valid", "valid", "valid", "dotted", "long_prefix_unique", "long_suffix_unique"])
            if not self._dotted
            else st.sampled_from(
                ["valid", "valid", "dotted", "long_prefix_unique", "long_suffix_unique", "sanitized_twin"]
            )
        )
        if id_format == "dotted":
            self._dotted.append(n)
            return f"functions.write_todos:{n}"
        if id_format == "sanitized_twin":
            # A distinct, API-valid id equal to what naive sanitizing makes of an earlier dotted one.
            twin = self.draw(st.sampled_from(self._dotted))
            self._dotted.remove(twin)  # one twin per dotted id: the input itself has no duplicate ids
            return f"functions_write_todos_{twin}"
        if id_format == "long_prefix_unique":
            return f"toolu_{n:04d}_" + "p" * 70
        if id_format == "long_suffix_unique":
            return "toolu_" + "s" * 70 + f"_{n:04d}"
        return f"toolu_01{n:06d}abc"

    def stamp(self) -> dict[str, str]:
        return {"uuid": self.uuid(), "timestamp": self.clock()}

    # --- message makers ----------------------------------------------------------------------------

    def add(self, message: Message) -> Message:
        self.messages.append(message)
        return message

    def user(self, content: str | list[ContentBlock], **fields: object) -> UserMessage:
        message = UserMessage.model_validate(
            {"type": "user", "message": UserPayload(role="user", content=content), **self.stamp(), **fields}
        )
        self.add(message)
        return message

    def assistant(self, message_id: str, blocks: list[ContentBlock], *, virtual: bool = False) -> AssistantMessage:
        payload = AssistantPayload(
            id=message_id, model="claude-sonnet-4-5", content=blocks, stop_reason="tool_use", usage={"input_tokens": 1}
        )
        message = AssistantMessage(
            message=payload, request_id=f"req_{message_id}", is_virtual=True if virtual else None, **self.stamp()
        )
        self.add(message)
        return message

    def prompt(self) -> None:
        """A user prompt: string or blocks, sometimes blank, meta, an interruption, or with an image."""
        kind = self.draw(
            st.sampled_from(
                [
                    "string",
                    "string",
                    "blocks",
                    "blank_string",
                    "blank_blocks",
                    "empty_list",
                    "image",
                    "document",
                    "meta",
                    "interrupt",
                ]
            )
        )
        if kind == "string":
            self.user(self.draw(st.sampled_from(["fix the bug", "2 + 2", "continue"])))
        elif kind == "blank_string":
            self.user(self.draw(st.sampled_from(["", "   ", "\n"])))
        elif kind == "blocks":
            self.user([TextBlock(text="please"), TextBlock(text=self.draw(TEXTS))])
        elif kind == "blank_blocks":
            self.user([TextBlock(text=self.draw(st.sampled_from(["", " \n "])))])
        elif kind == "empty_list":
            self.user([])
        elif kind == "document":
            document = DocumentBlock(source={"type": "text", "media_type": "text/plain", "data": "hello"})
            self.user([document, TextBlock(text="summarize")])
        elif kind == "image":
            self.user([ImageBlock(source=dict(_PNG)), TextBlock(text="what is this?")], image_paste_ids=[1])
        elif kind == "meta":
            self.user(LOCAL_COMMAND_CAVEAT, is_meta=True)
        else:
            self.user([TextBlock(text=INTERRUPT_MESSAGE_FOR_TOOL_USE)])
        self.flush_delayed()

    def flush_delayed(self) -> None:
        """Results delayed behind the user prompt just written (R4.6/R4.10 merge them back)."""
        for call, text in self.delayed:
            self.add_result(call, text, "normal")
        self.delayed.clear()

    def noise(self, *, api_safe_only: bool = False) -> None:
        """0–2 messages that never reach the API by themselves (or, unless ``api_safe_only``, that
        become meta user messages: attachments and local commands)."""
        kinds = ["progress", "informational", "api_error", "synthetic_error", "virtual_user", "virtual_assistant"]
        if not api_safe_only:
            kinds += ["local_command", "queued_command", "hook_success", "edited_text_file", "unknown_attachment"]
        for kind in self.draw(st.lists(st.sampled_from(kinds), max_size=2)):
            self._noise(kind)

    def _noise(self, kind: str) -> None:
        ids = self.uuid
        if kind == "progress":
            parent = self.draw(st.sampled_from([*self.calls.keys(), "none"]))
            tool_use_id = self.calls[parent].tool_use_id if parent in self.calls else "toolu_unknown"
            data: JsonObject = {"type": "bash_progress", "output": "…"}
            self.add(
                create_progress_message(
                    tool_use_id=tool_use_id, parent_tool_use_id=tool_use_id, data=data, clock=self.clock, ids=ids
                )
            )
        elif kind == "informational":
            self.add(create_informational_message("Checking…", clock=self.clock, ids=ids))
        elif kind == "api_error":
            error: JsonObject = {"status": 529, "message": "Overloaded"}
            self.add(
                ApiErrorSystemMessage(
                    level="error", error=error, retry_in_ms=500.0, retry_attempt=1, max_retries=10, **self.stamp()
                )
            )
        elif kind == "synthetic_error":
            text = self.draw(
                st.sampled_from(
                    [
                        "API Error: 500 Internal server error",
                        "Image was too large. Double press esc to go back and try again with a smaller image.",
                        "Prompt is too long",
                    ]
                )
            )
            self.add(create_assistant_api_error_message(text, error="unknown", clock=self.clock, ids=ids))
        elif kind == "virtual_user":
            self.user("virtual note", is_virtual=True)
        elif kind == "virtual_assistant":
            self.assistant(f"msg_v{self.next_serial()}", [TextBlock(text="virtual reply")], virtual=True)
        elif kind == "local_command":
            self.add(
                create_local_command_message(
                    "<local-command-stdout>ok</local-command-stdout>", clock=self.clock, ids=ids
                )
            )
        else:
            self.add(create_attachment_message(self._attachment(kind), clock=self.clock, ids=ids))

    def _attachment(self, kind: str) -> JsonObject:
        if kind == "queued_command":
            return {"type": "queued_command", "prompt": "also run the tests", "commandMode": "prompt"}
        if kind == "hook_success":
            return {
                "type": "hook_success",
                "hookName": "SessionStart",
                "hookEvent": self.draw(st.sampled_from(["SessionStart", "PostToolUse", "UserPromptSubmit"])),
                "content": self.draw(st.sampled_from(["", "hook said hi"])),
                "toolUseID": "toolu_hook",
            }
        if kind == "edited_text_file":
            return {"type": "edited_text_file", "filename": "/tmp/a.txt", "snippet": "1\tchanged"}
        return {"type": self.draw(st.sampled_from(["future_kind_x", "todo", "max_turns_reached"])), "data": 1}

    def boundary(self) -> None:
        self.add(create_compact_boundary_message("auto", 1234, clock=self.clock, ids=self.uuid))
        self.user("This session is being continued from a previous conversation. Summary: …", is_compact_summary=True)

    # --- one model reply ---------------------------------------------------------------------------

    def _reply_blocks(self, *, partial: bool) -> tuple[list[ContentBlock], list[str]]:
        """Blocks of one API response and the markers of its client tool_uses."""
        blocks: list[ContentBlock] = []
        thinking = self.draw(
            st.sampled_from(["none", "signed", "signed", "unsigned", "empty_signature", "scrubbed", "redacted"])
        )
        if thinking in {"signed", "unsigned", "empty_signature", "scrubbed"}:
            signature = {
                "signed": f"sig{self.next_serial()}",
                "unsigned": None,
                "empty_signature": "",
                "scrubbed": "[REDACTED_SIGNATURE]",  # exporters scrub signatures (API §1.10)
            }[thinking]
            blocks.append(ThinkingBlock(thinking="Let me think.", signature=signature))
        elif thinking == "redacted":
            blocks.append(RedactedThinkingBlock(data="EqQBCgIYAh"))
        if self.draw(st.booleans()):
            blocks.append(TextBlock(text=self.draw(TEXTS)))
        server = self.draw(st.sampled_from(["none", "none", "none", "answered", "unanswered"]))
        if server != "none":
            server_id = f"srvtoolu_{self.next_serial()}"
            blocks.append(ServerToolUseBlock(id=server_id, name="web_search", input={"query": "x"}))
            if server == "answered":
                blocks.append(ServerToolResultBlock(type="web_search_tool_result", tool_use_id=server_id, content=[]))
        markers: list[str] = []
        for _ in range(self.draw(st.integers(0, 1 if partial else 3))):
            marker = f"tu{self.next_serial()}"
            name = self.draw(st.sampled_from(["Bash", "Read", "write_todos", "Grep"]))
            blocks.append(ToolUseBlock(id=self.tool_use_id(), name=name, input={"marker": marker, "arg": 1}))
            markers.append(marker)
        if self.draw(st.integers(0, 15)) == 0:
            blocks.append(UnknownBlock(type="tool_use", name="Bash", input={}))  # malformed: no id
        return blocks, markers

    def _emit_reply(
        self,
        blocks: list[ContentBlock],
        *,
        split: bool,
        virtual: bool = False,
        after_part: Callable[[AssistantMessage], None] | None = None,
    ) -> list[AssistantMessage]:
        """One assistant message per block (Claude Code's streaming split, R9.4) or one message."""
        message_id = f"msg_{self.next_serial():04d}"
        groups = [[block] for block in blocks] if split else [blocks]
        emitted: list[AssistantMessage] = []
        for index, group in enumerate(groups):
            message = self.assistant(message_id, group, virtual=virtual)
            emitted.append(message)
            for block in group:
                if isinstance(block, ToolUseBlock):
                    marker = str(block.input["marker"]) if isinstance(block.input, dict) else ""
                    self.calls[marker] = _Call(marker, block.id, message.uuid, len(self.messages) - 1, virtual)
            if after_part is not None:
                after_part(message)
            if index < len(groups) - 1:
                self.noise(api_safe_only=True)
        return emitted

    def _result_message(self, call: _Call, text: str, fate: ResultFate) -> UserMessage:
        """Claude Code's tool-result user message: one tool_result, toolUseResult, source assistant."""
        content: str | list[ContentBlock]
        if fate == "error":
            content = f"<tool_use_error>{text}</tool_use_error>"
        elif fate == "error_with_image":
            content = [TextBlock(text=text), ImageBlock(source=dict(_PNG))]
        elif fate == "tool_reference":
            content = [TextBlock(text=text), ToolReferenceBlock(tool_name="Grep")]
        else:
            content = [TextBlock(text=text)] if self.draw(st.booleans()) else text
        block = ToolResultBlock(tool_use_id=call.tool_use_id, content=content)
        if fate in {"error", "error_with_image"}:
            block = ToolResultBlock(tool_use_id=call.tool_use_id, content=content, is_error=True)
        return UserMessage(
            message=UserPayload(role="user", content=[block]),
            tool_use_result={"stdout": text},
            source_tool_assistant_uuid=call.message_uuid,
            **self.stamp(),
        )

    def add_result(self, call: _Call, text: str, fate: ResultFate) -> None:
        if call.first_result is None:
            call.first_result = text
        self.add(self._result_message(call, text, fate))

    def _emit_results(self, call: _Call, fate: ResultFate, *, may_delay: bool) -> None:
        text = f"result {call.marker} copy 0"
        if fate == "missing":
            return
        if fate == "delayed" and may_delay:
            self.delayed.append((call, text))
            return
        self.add_result(call, text, "normal" if fate in {"delayed", "interleaved"} else fate)
        if fate == "duplicated":
            self.add_result(call, f"result {call.marker} copy 1", "normal")
        self.noise()

    def reply(self, *, may_delay: bool) -> None:
        """One model reply, its tool results (with their fates) and hooks; sometimes preceded by a
        failed streaming attempt whose partial messages get tombstoned (R6.1)."""
        if self.draw(st.integers(0, 5)) == 0:
            self._failed_attempt()
        odd = self.draw(st.sampled_from(["regular"] * 10 + ["empty", "legacy_string"]))
        if odd != "regular":
            # An end_turn reply stored with no blocks, or an old transcript's string content.
            payload = AssistantPayload(
                id=f"msg_{self.next_serial():04d}", model="claude-x", content=[] if odd == "empty" else "old reply"
            )
            self.add(AssistantMessage(message=payload, **self.stamp()))
            return
        blocks, markers = self._reply_blocks(partial=False)
        fate_choices: list[ResultFate] = [
            "normal",
            "normal",
            "missing",
            "duplicated",
            "delayed",
            "interleaved",
            "error",
            "error_with_image",
            "tool_reference",
        ]
        fates: dict[str, ResultFate] = {marker: self.draw(st.sampled_from(fate_choices)) for marker in markers}
        split = self.draw(st.booleans())
        virtual = self.draw(st.integers(0, 12)) == 0

        def after_part(message: AssistantMessage) -> None:
            # Streaming tool execution: a result can land between the parts of its reply (R4.7).
            for block in message.blocks:
                if isinstance(block, ToolUseBlock) and isinstance(block.input, dict):
                    marker = str(block.input["marker"])
                    if fates[marker] == "interleaved":
                        self._emit_results(self.calls[marker], "interleaved", may_delay=False)

        self._emit_reply(blocks, split=split, virtual=virtual, after_part=after_part if split else None)
        order = self.draw(st.permutations(markers))  # results out of tool_use order
        for marker in order:
            if not (split and fates[marker] == "interleaved"):
                self._emit_results(self.calls[marker], fates[marker], may_delay=may_delay)
        if self.draw(st.integers(0, 6)) == 0:
            self._orphan_result()
        if self.draw(st.integers(0, 6)) == 0:
            self._late_tombstone()

    def _failed_attempt(self) -> None:
        """R6.1: partial per-block messages of a failed stream, then their tombstones. Sometimes
        (chaos) a result for a partial tool_use made it into the history anyway."""
        blocks, markers = self._reply_blocks(partial=True)
        partials = self._emit_reply(blocks, split=True)
        for message in partials:
            self.retracted_uuids.add(message.uuid)
        leaked = self.draw(st.booleans())
        if markers and leaked:
            self.add_result(self.calls[markers[0]], f"result {markers[0]} copy 0", "normal")
        self.messages.extend(tombstones_for(partials))

    def _late_tombstone(self) -> None:
        """Chaos: retract an earlier reply although its results are in the history.

        A part holding a client tool_use takes every part of its reply with it (as R6.1 does for a
        failed attempt): retracting just that part would also withdraw a result streamed between the
        parts, and with it the user message that lets R4.7 merge the parts across a local command or
        hook, so a spec-exact normalizer legitimately loses later results of the same reply (found by
        these properties; see the helper report). Other parts are retracted alone, which is how a
        tombstone targets one exact message (R6.3).
        """
        candidates = [
            m for m in self.messages if isinstance(m, AssistantMessage) and m.uuid not in self.retracted_uuids
        ]
        if not candidates:
            return
        target = self.draw(st.sampled_from(candidates))
        targets = [target]
        if any(isinstance(block, ToolUseBlock) for block in target.blocks):
            targets = [
                m for m in candidates if m.api_message_id == target.api_message_id and not m.is_api_error_message
            ]
        for message in targets:
            self.retracted_uuids.add(message.uuid)
            self.add(TombstoneMessage(message=message))

    def _orphan_result(self) -> None:
        block = ToolResultBlock(tool_use_id=f"toolu_orphan{self.next_serial()}", content="stale")
        self.user([block])

    # --- the facts ---------------------------------------------------------------------------------

    def build(self) -> ChaosHistory:
        self.delayed.clear()  # no later prompt: those results were never written (missing)
        last_boundary = max(
            (i for i, m in enumerate(self.messages) if getattr(m, "subtype", None) == "compact_boundary"), default=-1
        )
        live = {c.marker for c in self.calls.values() if c.message_uuid not in self.retracted_uuids}
        retracted = frozenset(c.marker for c in self.calls.values()) - live
        required = frozenset(
            c.marker for c in self.calls.values() if c.marker in live and not c.virtual and c.position > last_boundary
        )
        expected = {
            marker: call.first_result
            for marker, call in self.calls.items()
            if marker in required and call.first_result is not None
        }
        return ChaosHistory(tuple(self.messages), retracted, required, expected)


@st.composite
def chaos_histories(draw: st.DrawFn) -> ChaosHistory:
    """A whole chaotic session: 1–4 prompts, each followed by 0–3 model replies and their tools."""
    builder = _HistoryBuilder(draw)
    if draw(st.integers(0, 8)) == 0:
        builder._orphan_result()  # resumed mid-turn: the history starts with a tool_result
    prompts = draw(st.integers(1, 4))
    for prompt_index in range(prompts):
        if prompt_index and draw(st.integers(0, 10)) == 0:
            builder.boundary()
        builder.noise()
        builder.prompt()
        replies = draw(st.integers(0, 3))
        for reply_index in range(replies):
            last_before_prompt = reply_index == replies - 1 and prompt_index < prompts - 1
            builder.reply(may_delay=last_before_prompt)
            builder.noise()
    return builder.build()


# --- ensure_tool_result_pairing inputs ----------------------------------------------------------------

_POOL = ["t1", "t2", "t3", "t4"]


def _pairing_user(draw: st.DrawFn, stamp: Callable[[], dict[str, str]]) -> UserMessage:
    kind = draw(st.sampled_from(["string", "results", "results", "mixed", "malformed"]))
    content: str | list[ContentBlock]
    if kind == "string":
        content = draw(st.sampled_from(["hi", ""]))
    else:
        ids = draw(st.lists(st.sampled_from(_POOL), max_size=4))
        content = [ToolResultBlock(tool_use_id=i, content=f"r{i}") for i in ids]
        if kind == "mixed":
            content.insert(draw(st.integers(0, len(content))), TextBlock(text="note"))
        if kind == "malformed":
            content.append(UnknownBlock(type="tool_result", content="no id"))
    return UserMessage(
        message=UserPayload(role="user", content=content), is_meta=draw(st.booleans()) or None, **stamp()
    )


def _pairing_assistant(draw: st.DrawFn, stamp: Callable[[], dict[str, str]]) -> AssistantMessage:
    blocks: list[ContentBlock] = []
    for kind in draw(
        st.lists(st.sampled_from(["text", "tool_use", "tool_use", "server", "server_answered"]), max_size=4)
    ):
        if kind == "text":
            blocks.append(TextBlock(text="x"))
        elif kind == "tool_use":
            blocks.append(ToolUseBlock(id=draw(st.sampled_from(_POOL)), name="Bash", input={}))
        else:
            server_id = draw(st.sampled_from(["s1", "s2"]))
            blocks.append(ServerToolUseBlock(id=server_id, name="web_search", input={}))
            if kind == "server_answered":
                blocks.append(ServerToolResultBlock(type="web_search_tool_result", tool_use_id=server_id, content=[]))
    payload = AssistantPayload(id=draw(st.sampled_from(["m1", "m2", "m3"])), model="x", content=blocks)
    return AssistantMessage(message=payload, **stamp())


@st.composite
def pairing_inputs(draw: st.DrawFn) -> list[ApiMessage]:
    """User/assistant lists with tool ids drawn from a 4-id pool: duplicates, orphans, gaps."""
    serial = iter(range(1, 10_000))

    def stamp() -> dict[str, str]:
        return {"uuid": f"p-{next(serial)}", "timestamp": "2026-01-01T00:00:00.000Z"}

    roles = draw(st.lists(st.sampled_from(["user", "assistant"]), max_size=10))
    return [_pairing_user(draw, stamp) if role == "user" else _pairing_assistant(draw, stamp) for role in roles]


def describe_all(messages: Sequence[Message]) -> str:
    """Multi-line compact notation of a message list."""
    return "\n".join(f"  [{i}] {describe(message)}" for i, message in enumerate(messages))


__all__ = ["ChaosHistory", "chaos_histories", "describe", "describe_all", "describe_block", "pairing_inputs"]
