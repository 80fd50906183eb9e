"""``RequestBuilder`` (issue 4: no rebuild from the start per request) is exactly ``to_api_request`` plus
``validate_api_request`` for every prefix of every history: the real Claude Code transcripts of the
corpus, random turn-shaped histories, and the shapes that must refuse a split."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentbus_redis.clock import FixedClock
from agentbus_redis.ids import SequentialIds
from agentbus_redis.messages.kinds import Message, TombstoneMessage
from agentbus_redis.normalize import NormalizeOptions, to_api_request, validate_request
from agentbus_redis.normalize.incremental import INCREMENTAL_FROM, RequestBuilder, is_human_prompt
from tests.shared.normalize_builders import assistant, image, text, tool_result, tool_use, user
from tests.shared.test_normalize_pipeline import _corpus_histories, _messages
from tests.shared.test_normalize_rendered import Chain, reminder
from tests.shared.test_normalize_rendered import text as rendered_text

CONTEXT = NormalizeOptions(user_context={"currentDate": "Today's date is 2026-11-23."})
SENDER_FITS_THINKING = NormalizeOptions(thinking_enabled=None)
"""The open turn keeps its signed thinking (API §1.10), which moves the open-turn boundary's effect off the
prefix — the split must stay exact there too."""
CALL_ORDER = NormalizeOptions(thinking_enabled=None, results_in_call_order=True)
"""The normalization worker's options (issue 29: a reply's tool results in call order)."""


def assert_same_as_full(builder: RequestBuilder, history: Sequence[Message]) -> bool:
    """One request of the builder against the full pipeline; returns whether it was spliced."""
    built = builder.build(history)
    full = to_api_request(history, options=builder.options, clock=FixedClock(), ids=SequentialIds())
    assert built.result.request == full.request
    # The worker writes the messages' JSON from the prefix's cached encoding: the bytes of the full request's.
    assert built.messages_json(orjson.dumps) == orjson.dumps(full.request["messages"])
    assert built.result.report.counts == full.report.counts
    assert built.violations == validate_request(full.request, options=builder.options)
    return built.spliced


def grow(history: Sequence[Message], options: NormalizeOptions, *, points: Sequence[int], reanchor_after: int) -> int:
    """Feed ``history[:m]`` for each m (increasing) to one builder, as a normalizer does; count splices."""
    builder = RequestBuilder(
        options=options, clock=FixedClock(), ids=SequentialIds(), reanchor_after=reanchor_after, incremental_from=0
    )
    return sum(assert_same_as_full(builder, history[:m]) for m in points)


PUBLISH_POINTS_PER_FILE = 48
"""Each point is checked against a full normalization of that prefix (quadratic in the file's length): 48 points
a file spread over its user messages keep every kind of cut in the corpus (the assert below counts the
spliced ones) at a third of the CPU of 160."""


def publish_points(history: Sequence[Message], budget: int = PUBLISH_POINTS_PER_FILE) -> list[int]:
    """Every length for short histories; for long ones the lengths that end on a user message (where a
    normalizer publishes), thinned to ``budget``, plus the whole history."""
    if len(history) <= budget:
        return list(range(1, len(history) + 1))
    ends_on_user = [m for m in range(1, len(history) + 1) if history[m - 1].type == "user"]
    step = max(1, len(ends_on_user) // budget)
    return sorted({*ends_on_user[::step], len(history)})


@pytest.mark.parametrize(
    "options",
    [NormalizeOptions(), CONTEXT, SENDER_FITS_THINKING, CALL_ORDER],
    ids=["defaults", "user_context", "sender_fits_thinking", "results_in_call_order"],
)
def test_r4_every_corpus_prefix_equals_the_full_pipeline(corpus_root: Path, options: NormalizeOptions) -> None:
    """R4.1–R4.29 + API safety: for every Claude Code transcript of the corpus and every publish point,
    the spliced request, its repair counts and its validation are the full pipeline's."""
    spliced = 0
    for _name, history in _corpus_histories(corpus_root):
        spliced += grow(history, options, points=publish_points(history), reanchor_after=4)
    assert spliced > 200  # the split path is the one exercised (turn and tool-round cuts), not the fallback


def turn(prompt: str, index: int, *, calls: int) -> list[Message]:
    """A human prompt, a reply with ``calls`` tool calls, their results and a final answer."""
    ids = [f"toolu_{index}_{n}" for n in range(calls)]
    out: list[Message] = [user(prompt)]
    if ids:
        out += [assistant(text("Looking."), *(tool_use(i) for i in ids), msg_id=f"msg_{index}_a")]
        out += [user([tool_result(i, f"out {i}") for i in ids])]
    out.append(assistant(text(f"Answer {index}."), msg_id=f"msg_{index}_b"))
    return out


def test_long_bus_session_is_spliced_and_exact() -> None:
    """The bus's own shape: 60 turns with tool calls, a request whenever the model is due (the history
    ends on a user message); after the first turns every request is spliced."""
    history = [message for index in range(60) for message in turn(f"step {index}", index, calls=index % 3)]
    builder = RequestBuilder(
        options=CONTEXT, clock=FixedClock(), ids=SequentialIds(), reanchor_after=24, incremental_from=0
    )
    due = [m for m in range(1, len(history) + 1) if history[m - 1].type == "user"]
    results = [assert_same_as_full(builder, history[:m]) for m in due]
    assert sum(results) >= len(results) - 3


def test_messages_json_survives_an_encoder_error_and_an_edited_request() -> None:
    """The prefix's cached JSON stays the encoding of its params when the encoder raises midway, and a
    request whose message list was edited after the build is encoded whole."""
    history = [message for index in range(12) for message in turn(f"step {index}", index, calls=index % 2)]
    builder = RequestBuilder(options=CALL_ORDER, clock=FixedClock(), ids=SequentialIds(), incremental_from=0)
    built = [builder.build(history[:m]) for m in range(1, len(history) + 1) if history[m - 1].type == "user"]
    last = built[-1]
    assert last.spliced
    assert last.prefix is not None
    assert last.prefix.param_count > 1
    calls = 0

    def failing(value: object) -> bytes:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise TypeError("not encodable")
        return orjson.dumps(value)

    with pytest.raises(TypeError):
        last.messages_json(failing)
    assert last.messages_json(failing) == orjson.dumps(last.result.request["messages"])
    for request in built:
        assert request.messages_json(orjson.dumps) == orjson.dumps(request.result.request["messages"])
    last.result.request["messages"][0] = {"role": "user", "content": "edited"}
    assert last.messages_json(orjson.dumps) == orjson.dumps(last.result.request["messages"])


def test_short_histories_are_built_in_full() -> None:
    """Below ``INCREMENTAL_FROM`` messages a prefix costs more than it saves: no prefix is anchored and
    every request is the full pipeline's; from there on the same session is spliced."""
    history = [message for index in range(30) for message in turn(f"step {index}", index, calls=1)]
    builder = RequestBuilder(options=CONTEXT, clock=FixedClock(), ids=SequentialIds())
    due = [m for m in range(1, len(history) + 1) if history[m - 1].type == "user"]
    short = [m for m in due if m < INCREMENTAL_FROM]
    assert short
    assert not any(assert_same_as_full(builder, history[:m]) for m in short)
    longer = [m for m in due if m >= INCREMENTAL_FROM]
    assert sum(assert_same_as_full(builder, history[:m]) for m in longer) >= len(longer) - 3


def test_long_agentic_turn_is_spliced_at_tool_rounds() -> None:
    """One prompt, then 80 tool rounds (the shape of a Claude Code task): each request after a round's
    results is spliced at the latest round start, and the turn's thinking rules still come out exact."""
    history: list[Message] = [user("refactor the module")]
    for index in range(80):
        call = f"toolu_round_{index}"
        history.append(assistant(text(f"Step {index}."), tool_use(call), msg_id=f"msg_round_{index}"))
        history.append(user([tool_result(call, f"done {index}")]))
    history.append(assistant(text("All done."), msg_id="msg_final"))
    history.append(user("thanks, now the tests"))
    builder = RequestBuilder(
        options=CONTEXT, clock=FixedClock(), ids=SequentialIds(), reanchor_after=24, incremental_from=0
    )
    due = [m for m in range(1, len(history) + 1) if history[m - 1].type == "user"]
    results = [assert_same_as_full(builder, history[:m]) for m in due]
    assert sum(results) >= len(results) - 3


def pipeline_runs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The length of every history the request builder runs the pipeline over, from now on (appended to the
    list returned; a test clears it per request)."""
    from agentbus_redis.normalize import incremental

    runs: list[int] = []

    def counted(messages: Sequence[Message], **kwargs: object) -> object:
        runs.append(len(messages))
        return to_api_request(messages, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(incremental, "to_api_request", counted)
    return runs


@pytest.mark.parametrize("shape", ["turns", "tool_rounds"])
def test_the_prefix_moves_without_normalizing_the_head_again(shape: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 31: once the first prefix is anchored, no request runs the pipeline over more than the suffix
    (at most ``reanchor_after`` messages and the one that went past it) or the span the prefix moves over
    and its stand-in — so a request costs the same at 300 messages as at 30 — and every request is exact."""
    if shape == "turns":
        history = [message for index in range(50) for message in turn(f"step {index}", index, calls=index % 3)]
    else:
        history = [user("refactor the module")]
        for index in range(150):
            call = f"toolu_round_{index}"
            history += [
                assistant(text(f"Step {index}."), tool_use(call), msg_id=f"m{index}"),
                user([tool_result(call)]),
            ]
    runs = pipeline_runs(monkeypatch)
    builder = RequestBuilder(options=CONTEXT, clock=FixedClock(), ids=SequentialIds(), reanchor_after=4)
    due = [m for m in range(1, len(history) + 1) if history[m - 1].type == "user"]
    spliced, longest_run = [], []
    for m in due:
        runs.clear()
        spliced.append(assert_same_as_full(builder, history[:m]))
        longest_run.append(max(runs, default=0))
    assert len(history) > 150
    assert sum(spliced) >= len(spliced) - 6
    # the first prefix is anchored over the head once; from the second half on every run is short
    later = longest_run[len(due) // 2 :]
    assert max(later) <= 4 + 4, later  # a suffix past 4 by one request's messages, or a span and its stand-in


@pytest.mark.parametrize("prompt_kind", ["text", "blocks"])
def test_a_prefix_moving_onto_the_requests_prompt_runs_the_pipeline_once(
    prompt_kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 31: when the prefix is due to move onto the request's own last message, a human prompt, one
    pipeline run over the span and the prompt both builds the request and moves the prefix (not one over the
    span and a stand-in, then one over the prompt). A prompt of content blocks is not known to come out as the
    stand-in does: it moves the usual way, two runs. Every request is exact either way."""

    def prompt(index: int) -> Message:
        return user(f"step {index}") if prompt_kind == "text" else user([text(f"step {index}")])

    history = [message for index in range(40) for message in (prompt(index), assistant(text(f"Answer {index}.")))]
    runs = pipeline_runs(monkeypatch)
    builder = RequestBuilder(options=CONTEXT, clock=FixedClock(), ids=SequentialIds(), reanchor_after=4)
    due = [m for m in range(1, len(history) + 1) if history[m - 1].type == "user"]
    runs_per_request = []
    for m in due:
        runs.clear()
        assert assert_same_as_full(builder, history[:m]) or m < 2 * INCREMENTAL_FROM
        runs_per_request.append(len(runs))
    later = runs_per_request[len(due) // 2 :]
    if prompt_kind == "text":
        assert later == [1] * len(later), runs_per_request
    else:
        assert max(later) == 2, runs_per_request


@pytest.mark.parametrize(
    "continuation",
    [
        pytest.param(lambda: [user([tool_result("toolu_0_0", "late")])], id="result-for-a-prefix-call"),
        pytest.param(lambda: [assistant(tool_use("toolu_0_0"), msg_id="m9"), user("x")], id="repeated-call-id"),
        pytest.param(lambda: [assistant(text("more"), msg_id="msg_0_b"), user("x")], id="repeated-message-id"),
        pytest.param(lambda: [user([image()]), user([image()] * 100)], id="media-over-the-limit"),
        pytest.param(lambda: [assistant(text("  "), msg_id="m8"), user("x")], id="whitespace-pass"),
    ],
)
def test_split_refused_where_the_sides_interact(continuation: object) -> None:
    """Cross-cut shapes (shared ids, late results, global media limit, R4.16 on one side only) are
    normalized in full — and still equal the full pipeline."""
    history = [*turn("first", 0, calls=2), *turn("second", 1, calls=1), user("again")]
    builder = RequestBuilder(
        options=NormalizeOptions(), clock=FixedClock(), ids=SequentialIds(), reanchor_after=0, incremental_from=0
    )
    assert assert_same_as_full(builder, history)  # the clean history splices, cut before "again"
    builder.reanchor_after = 1000  # keep that cut: the continuation lands on its far side
    extra = continuation()  # type: ignore[operator]
    assert not assert_same_as_full(builder, [*history, *extra])


def test_tombstone_across_the_cut_refuses_the_split() -> None:
    history = [*turn("first", 0, calls=1), *turn("second", 1, calls=0), user("again")]
    builder = RequestBuilder(
        options=NormalizeOptions(), clock=FixedClock(), ids=SequentialIds(), reanchor_after=0, incremental_from=0
    )
    assert assert_same_as_full(builder, history)
    builder.reanchor_after = 1000
    assert not assert_same_as_full(builder, [*history, TombstoneMessage(message=history[1]), user("x")])


def test_a_system_role_attachment_arriving_late_turns_splicing_off() -> None:
    """A history with ``renderedRole: "system"`` attachments is built in full (their placement spans the whole
    history). The builder scans only the messages added since its last build for them: one that arrives after
    many spliced requests still turns splicing off, and a history that is not the one scanned is scanned anew."""
    chain = Chain()
    for index in range(8):
        chain.prompt(f"step {index}").reply(f"msg_{index}", rendered_text(f"answer {index}"))
    plain = chain.messages()
    builder = RequestBuilder(
        options=NormalizeOptions(), clock=FixedClock(), ids=SequentialIds(), reanchor_after=1, incremental_from=0
    )
    assert sum(assert_same_as_full(builder, plain[:m]) for m in range(1, len(plain) + 1, 2)) >= 6
    chain.attachment("date_change", [reminder("The date is now 2026-11-28.")], role="system").prompt("and now?")
    late = [*plain, *chain.messages()[len(plain) :]]
    assert not assert_same_as_full(builder, late)
    # Another history as long, whose last messages were not the ones scanned: scanned anew, so it splices.
    assert assert_same_as_full(builder, [*plain, assistant(text("Done."), msg_id="msg_x"), user("more")])
    assert not assert_same_as_full(builder, [*late, assistant(text("Done."), msg_id="msg_late"), user("more")])
    fresh = RequestBuilder(
        options=NormalizeOptions(), clock=FixedClock(), ids=SequentialIds(), reanchor_after=1, incremental_from=0
    )
    assert not assert_same_as_full(fresh, late)


def test_human_prompt_excludes_meta_results_and_blank() -> None:
    assert is_human_prompt(user("go"))
    assert not is_human_prompt(user("   "))
    assert not is_human_prompt(user([tool_result("t", "x")]))
    assert not is_human_prompt(user("go", is_meta=True))
    assert not is_human_prompt(assistant(text("go")))


_turns = st.lists(
    st.tuples(st.sampled_from(["go", "next", "fix it"]), st.lists(_messages, max_size=4)), min_size=1, max_size=6
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(turns=_turns, user_context=st.booleans(), thinking_enabled=st.sampled_from([False, None]))
def test_r4_random_turn_histories_equal_the_full_pipeline(
    turns: list[tuple[str, list[Message]]], user_context: bool, thinking_enabled: bool | None
) -> None:
    """Random messages of every broken shape between human prompts: every prefix splices exactly or
    falls back (open-turn thinking stripped, or kept for the sender as the normalization worker does)."""
    history = [message for prompt, rest in turns for message in (user(prompt), *rest)]
    base = CONTEXT if user_context else NormalizeOptions()
    options = base.model_copy(update={"thinking_enabled": thinking_enabled})
    grow(history, options, points=range(1, len(history) + 1), reanchor_after=1)
