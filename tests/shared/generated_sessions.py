"""Claude Code sessions the suite makes itself, for the end-to-end tests that must run on a fresh clone
without the third-party corpus (issue 16): the shapes that matter to the bus — a plain chat, tool rounds
with parallel calls split over lines that share ``message.id`` (R4.7), results with ``toolUseResult`` and
``sourceToolAssistantUUID``, progress and system lines beside the chain, an ``isMeta`` user line, a turn
interrupted before its result (R7.17), a long session of many rounds, a tool loop in progress with
extended thinking (API §1.10) and a session shaped like a current Claude Code's file (2.1.332: attachments
on the chain with what they ``rendered`` and as which role, parallel calls, a failing call)."""

from __future__ import annotations

from collections.abc import Callable

from tests.shared.transcript_builders import (
    Obj,
    assistant,
    envelope,
    jsonl,
    progress,
    system,
    text,
    tool_result,
    user,
)


class _Chain:
    """Appends lines, each child of the last line on the chain (progress and system lines hang off it too)."""

    def __init__(self, session: str) -> None:
        self.session = session
        self.lines: list[Obj] = []
        self.leaf: str | None = None
        self.second = 0

    def _uuid(self) -> str:
        return f"{self.session}-{len(self.lines):04d}"

    def add(self, line: Obj, *, on_chain: bool = True) -> str:
        line["sessionId"] = self.session
        self.lines.append(line)
        self.second += 1
        if on_chain:
            self.leaf = line["uuid"]
        return str(line["uuid"])

    def prompt(self, content: object, **extra: object) -> str:
        return self.add(user(self._uuid(), self.leaf, content, second=self.second, **extra))

    def reply(self, blocks: list[Obj], *, msg_id: str | None = None) -> str:
        return self.add(assistant(self._uuid(), self.leaf, blocks, msg_id=msg_id, second=self.second))

    def result(self, call_id: str, source: str, content: str = "ok") -> str:
        return self.prompt(
            [tool_result(call_id, content)],
            toolUseResult={"stdout": content, "stderr": "", "interrupted": False},
            sourceToolAssistantUUID=source,
        )

    def progress(self) -> None:
        self.add(progress(self._uuid(), self.leaf, second=self.second), on_chain=False)

    def attachment(self, attachment: Obj, rendered: str, role: str) -> str:
        """An attachment line as Claude Code 2.1.332 writes it: the text it sent (``rendered``) and as which
        role (``renderedRole``: ``user`` folds it into the next user message, ``system`` sends a system one)."""
        line = envelope(self._uuid(), self.leaf, self.second)
        line.update(type="attachment", attachment=attachment, rendered=[{"content": rendered}], renderedRole=role)
        return self.add(line)

    def system(self, subtype: str, **extra: object) -> str:
        return self.add(system(self._uuid(), self.leaf, subtype, second=self.second, level="info", **extra))

    def jsonl(self) -> bytes:
        return jsonl(*self.lines).encode()


def call(call_id: str, command: str) -> Obj:
    return {"type": "tool_use", "id": call_id, "name": "Bash", "input": {"command": command}}


def chat_session() -> bytes:
    chain = _Chain("gen-chat")
    chain.prompt("hello")
    chain.reply([text("Hi! What shall we build?")])
    chain.prompt("a parser")
    chain.reply([text("Let us start with the grammar.")])
    return chain.jsonl()


def tool_rounds_session(rounds: int = 3, *, session: str = "gen-tools") -> bytes:
    """``rounds`` tool rounds: one call, then two parallel calls whose reply is split over two lines."""
    chain = _Chain(session)
    chain.prompt("count the files, then show the largest two")
    chain.add(user(chain._uuid(), chain.leaf, "<system-reminder>cwd is /proj</system-reminder>", isMeta=True))
    for number in range(rounds):
        first = chain.reply([text(f"Round {number}: listing."), call(f"t{number}a", "ls | wc -l")])
        chain.progress()
        chain.result(f"t{number}a", first, "42")
        message_id = f"msg_parallel_{number}"
        left = chain.reply([call(f"t{number}b", "du -s a")], msg_id=message_id)
        right = chain.reply([call(f"t{number}c", "du -s b")], msg_id=message_id)
        chain.result(f"t{number}b", left, "10 a")
        chain.progress()
        chain.result(f"t{number}c", right, "20 b")
        chain.system("turn_duration", durationMs=1200)
        chain.reply([text(f"Round {number} done: b is larger.")])
        chain.prompt(f"next round after {number}")
    chain.reply([text("All rounds done.")])
    return chain.jsonl()


def interrupted_session() -> bytes:
    """A call whose result never came (the user interrupted): resume closes the turn (R7.17)."""
    chain = _Chain("gen-interrupted")
    chain.prompt("run the slow build")
    chain.reply([text("Building."), call("slow1", "make all")])
    return chain.jsonl()


def thinking_loop_session() -> bytes:
    """A tool loop in progress with extended thinking: a finished turn that thought, then a turn whose
    reply streamed as one line per block (R9: signed thinking, redacted_thinking, text, two calls, one
    ``message.id``), its results in, waiting for the model — the open turn whose thinking a continued
    loop must pass back unmodified (anthropic-api-rules.md §1.10)."""
    chain = _Chain("gen-thinking")
    chain.prompt("what is in this repo?")
    chain.reply([{"type": "thinking", "thinking": "A quick look is enough.", "signature": "EqQBsig0=="}])
    chain.reply([text("A parser and its tests.")], msg_id=chain.lines[-1]["message"]["id"])
    chain.prompt("count the lines of the parser and its tests")
    message_id = "msg_thinking_loop"
    thought = "Two files: “parser.py” and tests/ — count both.\nUse wc -l; ü 🙂 \\ done"
    chain.reply([{"type": "thinking", "thinking": thought, "signature": "EqQBCkYIBxgCKkD+/=="}], msg_id=message_id)
    chain.reply([{"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}], msg_id=message_id)
    chain.reply([text("Counting both.")], msg_id=message_id)
    left = chain.reply([call("think_a", "wc -l parser.py")], msg_id=message_id)
    right = chain.reply([call("think_b", "wc -l tests/*")], msg_id=message_id)
    chain.result("think_a", left, "120 parser.py")
    chain.result("think_b", right, "340 total")
    return chain.jsonl()


def current_client_session() -> bytes:
    """The shape of a fresh Claude Code 2.1.332 file: the prompt, then attachment lines on the chain (the
    environment and date as system text, a file reminder for the prompt), a reply with two parallel calls
    over two lines of one ``message.id``, one result an error, the final answer, and one more round with a
    reminder attachment between a result and the next reply."""
    chain = _Chain("gen-current")
    chain.prompt("fix the failing test")
    chain.attachment(
        {"type": "date", "date": "2026-11-27"},
        "<system-reminder>\nToday's date is 2026-11-27.\n</system-reminder>",
        "system",
    )
    chain.attachment(
        {"type": "environment", "snapshot": {"workingDirectory": "/home/alice/proj", "platform": "linux"}},
        "<system-reminder>\n# Environment\n - Primary working directory: /home/alice/proj\n</system-reminder>",
        "system",
    )
    message_id = "msg_current_parallel"
    left = chain.reply([text("Looking at both."), call("cur_a", "pytest -x")], msg_id=message_id)
    right = chain.reply([call("cur_b", "cat missing.txt")], msg_id=message_id)
    chain.result("cur_a", left, "1 failed")
    chain.prompt(
        [
            {
                "type": "tool_result",
                "tool_use_id": "cur_b",
                "content": "cat: missing.txt: No such file",
                "is_error": True,
            }
        ],
        toolUseResult="Error: cat: missing.txt: No such file",
        sourceToolAssistantUUID=right,
    )
    chain.attachment(
        {"type": "todo_reminder", "content": [], "itemCount": 0},
        "<system-reminder>\nThe todo list is empty.\n</system-reminder>",
        "user",
    )
    fix = chain.reply([call("cur_c", "sed -i s/1/2/ test_x.py")])
    chain.result("cur_c", fix, "")
    chain.reply([text("Fixed: the expected value was off by one.")])
    return chain.jsonl()


GENERATED_SESSIONS: dict[str, Callable[[], bytes]] = {
    "chat": chat_session,
    "tool-rounds": tool_rounds_session,
    "interrupted": interrupted_session,
    "thinking-loop": thinking_loop_session,
    "long": lambda: tool_rounds_session(40, session="gen-long"),
    "current-client": current_client_session,
}
"""Name → builder of each generated session (bytes of a JSONL transcript)."""
