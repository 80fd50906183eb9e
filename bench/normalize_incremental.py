"""Benchmark: requests of a growing session built by ``RequestBuilder`` (cached prefix of finished turns)
against the full pipeline (``to_api_request`` + ``validate_api_request`` over the whole history), same run.

    uv run python bench/normalize_incremental.py [--turns 50 200 800] [--calls 0 2] [--reanchor-after 0 4 24]

A session of N turns (a prompt, optionally a reply with tool calls and their results, a final answer),
and one long agent turn of N tool rounds, are replayed request by request — one request whenever the
model is due (the history ends on a user message), as the normalization worker builds them — and the CPU
per request is printed for both, with the ratio. Both produce identical requests
(``tests/shared/test_normalize_incremental.py``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentbus_redis.api.validation import validate_api_request
from agentbus_redis.messages.content import TextBlock, ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.factories import create_assistant_message, create_user_message
from agentbus_redis.messages.kinds import Message
from agentbus_redis.normalize import NormalizeOptions, to_api_request
from agentbus_redis.normalize.incremental import REANCHOR_AFTER, RequestBuilder


def session(turns: int, calls: int) -> list[Message]:
    history: list[Message] = []
    for turn in range(turns):
        history.append(create_user_message(f"turn {turn}: check module m{turn} and report what it does"))
        ids = [f"toolu_{turn}_{n}" for n in range(calls)]
        if ids:
            uses = [ToolUseBlock(id=i, name="Read", input={"file_path": f"src/m{turn}.py"}) for i in ids]
            history.append(create_assistant_message([TextBlock(text="Reading it first."), *uses]))
            history.append(create_user_message([ToolResultBlock(tool_use_id=i, content="def f(): ...\n") for i in ids]))
        history.append(create_assistant_message(f"Module m{turn} defines one function; nothing to change."))
    return history


def agentic_turn(rounds: int) -> list[Message]:
    """One prompt and ``rounds`` tool rounds (a reply with a call, its result): a long agent task."""
    history: list[Message] = [create_user_message("refactor the package and keep the tests green")]
    for index in range(rounds):
        call = ToolUseBlock(id=f"toolu_r{index}", name="Read", input={"file_path": f"src/m{index}.py"})
        history.append(create_assistant_message([TextBlock(text=f"Step {index}: reading m{index}."), call]))
        history.append(create_user_message([ToolResultBlock(tool_use_id=call.id, content="def f(): ...\n")]))
    return history


def per_request_ms(history: list[Message], build: object) -> float:
    due = [m for m in range(1, len(history) + 1) if history[m - 1].type == "user"]
    started = time.process_time()
    for m in due:
        build(history[:m])  # type: ignore[operator]
    return (time.process_time() - started) * 1000 / len(due)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, nargs="+", default=[50, 200, 800])
    parser.add_argument("--calls", type=int, nargs="+", default=[0, 2])
    parser.add_argument(
        "--reanchor-after",
        type=int,
        nargs="+",
        default=[REANCHOR_AFTER],
        help="RequestBuilder's reanchor_after: how long a suffix is kept before the prefix moves (one column each)",
    )
    args = parser.parse_args()
    options = NormalizeOptions()

    def full(history: list[Message]) -> None:
        validate_api_request(to_api_request(history, options=options).request)

    cases = [
        (f"{turns:4d} turns, {calls} calls/turn", session(turns, calls)) for calls in args.calls for turns in args.turns
    ]
    cases += [(f"1 turn, {rounds:4d} tool rounds", agentic_turn(rounds)) for rounds in args.turns]
    for label, history in cases:
        baseline = per_request_ms(history, full)
        columns = []
        for reanchor_after in args.reanchor_after:
            builder = RequestBuilder(options=options, reanchor_after=reanchor_after)
            incremental = per_request_ms(history, builder.build)
            name = f"builder({reanchor_after})" if len(args.reanchor_after) > 1 else "builder"
            columns.append(f"{name} {incremental:6.2f} ms/request → {baseline / incremental:5.1f}× less CPU")
        print(f"{label:26s} ({len(history):5d} messages): full {baseline:7.2f} ms/request, " + ", ".join(columns))


if __name__ == "__main__":
    main()
