"""``RequestBuilder``: ``to_api_request`` + ``validate_api_request`` for a session that grows, without
normalizing (or validating) the whole history for every request.

A request is dominated by what is over: a prefix ``H[:k]`` that ends where a new turn (a human prompt)
or a new tool round (an assistant reply right after the previous round's tool results) begins at
``H[k]``, every tool call of it answered inside it. Under the conditions below the pipeline's output
for ``H`` is ``X ++ Y``: ``X`` depends on ``H[:k]`` alone and ``Y`` is the pipeline run on ``H[k:]``
(without the user-context message, which belongs to ``X``; for a tool-round cut without the
``(no content)`` leading user message API §1.6 puts before a suffix that starts with a reply). So ``X``
is computed once — as the pipeline's output for ``H[:k]`` followed by a stand-in for ``H[k]`` (a prompt,
or a reply), whose own message is then dropped: the stand-in makes the prefix "not last" exactly as
``H[k]`` does (R4.15, R4.17, the final trim leave it alone) and keeps the open turn where ``H[k]`` keeps
it — and every later request normalizes only ``H[k:]``. Once that suffix grows past ``reanchor_after``
messages the prefix moves forward to a later cut ``k'``, and it moves the way a request is spliced: the
pipeline runs over ``H[k:k']`` and a stand-in for ``H[k']`` only, joined to ``X`` under the same conditions
(``_advance``). So a request costs about the same at 40 messages as at 800; the pipeline runs over the
whole head only for the first prefix, or when a move is refused. When the prefix is due to move onto the
request's own last message, a human prompt (the usual request of a turn), that prompt is its own stand-in:
one run over the span and the prompt builds the request and moves the prefix (``_splice_moving``). Since
that move costs nothing more than the request, a request ending on a human prompt makes it whatever the
suffix's length.

Conditions (each checked; any doubt → the full pipeline, so the result is always exactly
``to_api_request(H)``):

- the cut: ``H[k]`` is a human prompt (not meta, not virtual, no tool_result, non-blank) or a reply
  after tool results; every tool_use of ``H[:k]`` has its result in ``H[:k]``; the stand-in's message
  comes out alone after a message of the other role (nothing folded into it, no placeholder results:
  the seam holds), and the stand-in request validates;
- across the cut: no uuid, API message id, tool_use id or server tool id on both sides; nothing in
  ``H[k:]`` answers or references a call of ``H[:k]``, and nothing in ``H[:k]`` one of ``H[k:]``; no
  tombstone on one side targets the other (nor ``H[k]``), none targets a uuid-less message; ``H[k:]``
  holds no compact boundary; after a tool-round cut ``H[k:]`` starts no new turn (the open turn, where
  the thinking rules apply, would move off the prefix's tail: the prefix is re-anchored instead);
- global passes: R4.16 (whitespace-only assistants) fires on both sides or on neither; no tool id was
  rewritten and no excess media stripped on either side, and both sides' media stay within the limit;
- options: R4.20 ``snip`` off, R4.13 relocation (``toolref_defer`` with tool search) off.

Histories shorter than ``INCREMENTAL_FROM`` messages are built in full (the prefix would not pay off).

Validation splits the same way: the stand-in request validated the prefix side once; a spliced request
is accepted when the suffix's own request validates, the tool ids of the two sides are disjoint and the
media of both fit. A request that does not pass is rebuilt and validated in full, so the violations
reported (and the error raised, e.g. R4.21) are always those of the full pipeline. The repairs of a
spliced request are the prefix's then ``Y``'s: the same counts as the full run, in another order;
``report.pairing`` is None. ``tests/shared/test_normalize_incremental.py`` checks all of it against the
full pipeline on every corpus transcript and on random histories.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import is_

from agentbus_redis.api.request_view import SERVER_TOOL_USE_TYPES
from agentbus_redis.api.types import MessageParam, MessagesRequest, SystemMessageParam
from agentbus_redis.api.validation import MAX_MEDIA_ITEMS, ApiViolation
from agentbus_redis.clock import Clock, utc_now
from agentbus_redis.errors import AgentbusError
from agentbus_redis.ids import IdSource, random_uuid
from agentbus_redis.messages.constants import NO_CONTENT_MESSAGE
from agentbus_redis.messages.content import TextBlock, ToolResultBlock
from agentbus_redis.messages.factories import create_assistant_message
from agentbus_redis.messages.kinds import AssistantMessage, Message, TombstoneMessage, UserMessage
from agentbus_redis.messages.pairing import tool_result_ids, tool_use_ids
from agentbus_redis.messages.system import CompactBoundarySystemMessage
from agentbus_redis.messages.tombstones import retracted_uuids
from agentbus_redis.normalize.api_client_steps import MEDIA_TYPES
from agentbus_redis.normalize.attachments.rendered import has_system_role_attachments
from agentbus_redis.normalize.options import NormalizeOptions
from agentbus_redis.normalize.pipeline import NormalizedRequest, to_api_request, validate_request
from agentbus_redis.normalize.report import NormalizationReport, Repair, RepairKind
from agentbus_redis.wire import field_or_none

STAND_IN_PROMPT = "agentbus: the next turn starts here"
"""The prompt that stands in for ``H[k]`` while the prefix is normalized (its message is dropped)."""

REANCHOR_AFTER = 4
"""Move the prefix forward once the suffix normalized per request holds more messages than this. Moving it
costs a pipeline run over the messages it passes (``_advance``), so a short suffix is cheap to keep: 4 is
the fastest of 0–24 (``bench/normalize_incremental.py``)."""

INCREMENTAL_FROM = 8
"""Histories shorter than this are built in full: a spliced request runs the pipeline twice (the suffix,
and now and then the span the prefix moves over), each run with a fixed cost of its own, which a full
run over fewer than ~8 messages undercuts (``bench/normalize_incremental.py --turns 2 4 8 16``)."""

_SPLIT_BREAKERS = frozenset({RepairKind.TOOL_ID_REWRITTEN, RepairKind.EXCESS_MEDIA_STRIPPED})
"""Passes whose choices depend on the whole request: a side that needed one is normalized in full."""

STAND_IN_REPLY = "agentbus: the next tool round starts here"
"""The reply that stands in for ``H[cut]`` when the cut is inside a turn (its message is dropped)."""

_STAND_IN_REPLY_PARAM = {"role": "assistant", "content": [{"type": "text", "text": STAND_IN_REPLY}]}
_STAND_IN_PROMPT_PARAM = {"role": "user", "content": STAND_IN_PROMPT}
_LEADING_USER_PARAM = {"role": "user", "content": NO_CONTENT_MESSAGE}

Encode = Callable[[object], bytes]
"""A compact JSON encoder (``orjson.dumps``)."""


@dataclass(frozen=True, slots=True)
class BuiltRequest:
    """A request and the violations ``validate_api_request`` finds in it (empty: publishable)."""

    result: NormalizedRequest
    violations: list[ApiViolation]
    spliced: bool
    """Built from a cached prefix (False: the full pipeline ran)."""
    prefix: _Prefix | None = None
    """The cached prefix whose params the request's messages start with (a spliced request)."""

    def messages_json(self, encode: Encode) -> bytes:
        """``encode(self.result.request["messages"])``, for a compact JSON ``encode`` such as ``orjson.dumps``
        (a list is ``[``, its items' encodings joined by ``,``, then ``]``; an item's encoding does not depend
        on where it sits). The prefix's params are the same dicts request after request, so their JSON is
        cached with the prefix (``_Covered.encoded``) and only the rest is encoded here: the bytes are those
        of encoding the whole list, without the O(history) encoding of every request."""
        messages = self.result.request["messages"]
        prefix = self.prefix
        count = 0 if prefix is None else prefix.param_count
        if prefix is None or count == 0 or not _starts_with(messages, prefix.covered.params, count):
            return encode(messages)
        rest = messages[count:]
        with prefix.covered.encoded(count, encode) as head:
            # encode(rest) is "[" + the rest's items + "]": its items follow the head's after a comma.
            return b"".join((b"[", head, b"," + encode(rest)[1:] if rest else b"]"))


@dataclass(slots=True)
class _Covered:
    """What the prefixes of one builder have covered, grown in place as the prefix moves forward.

    Moving the prefix used to copy its message list, repairs and six id sets (O(history) per move, and the
    prefix moves on about every request). They only ever grow, and the builder keeps one prefix at a time,
    so the prefixes of a builder share one ``_Covered``: a move appends the span's share (O(span)). A
    prefix reads the lists up to its own lengths, so an earlier prefix still sees its own params and repairs
    (``_splice_moving`` splices with the prefix it just moved); the sets hold the newest prefix's ids, so
    only the prefix whose ``cut`` is ``cut`` here may be checked against them (``_Prefix.current``)."""

    cut: int
    params: list[MessageParam | SystemMessageParam]
    repairs: list[Repair]
    uuids: set[str]
    message_ids: set[str]
    tool_use_ids: set[str]
    referenced_tool_ids: set[str]
    tombstone_targets: set[str]
    request_tool_ids: set[str]
    """Every tool_use and server tool id in ``params``."""
    json: bytearray = field(default_factory=bytearray)
    """The JSON of ``params[:len(json_ends)]``, each param's encoding joined by ``,`` (``encoded``)."""
    json_ends: list[int] = field(default_factory=list)
    """``json_ends[i]``: where the encoding of ``params[i]`` ends in ``json``."""
    json_encoder: Encode | None = None

    def encoded(self, count: int, encode: Encode) -> memoryview:
        """The JSON of ``params[:count]`` (items joined by ``,``, no brackets), encoding only the params not
        encoded yet: they never change once in a prefix. Release the view before the next call."""
        if encode is not self.json_encoder:
            self.json, self.json_ends, self.json_encoder = bytearray(), [], encode
        for param in self.params[len(self.json_ends) : count]:
            encoded = encode(param)  # first: an encoder that raises leaves the cache as it was
            if self.json:
                self.json += b","
            self.json += encoded
            self.json_ends.append(len(self.json))
        return memoryview(self.json)[: self.json_ends[count - 1]]


@dataclass(frozen=True, slots=True)
class _Prefix:
    """``X``, the API messages of ``H[:cut]``, and what the split conditions compare against."""

    cut: int
    round_cut: bool
    """``H[cut]`` starts a tool round inside a turn (an assistant reply after tool results); False: a turn
    (a human prompt)."""
    anchor: Message
    """``H[cut - 1]``: the history must still hold this very object there."""
    covered: _Covered
    """The params, repairs and id sets, shared with the builder's later prefixes (see ``_Covered``)."""
    param_count: int
    """This prefix's params are ``covered.params[:param_count]``."""
    repair_count: int
    whitespace_pass_fired: bool
    media: int

    @property
    def params(self) -> list[MessageParam | SystemMessageParam]:
        return self.covered.params[: self.param_count]

    @property
    def repairs(self) -> tuple[Repair, ...]:
        return tuple(self.covered.repairs[: self.repair_count])

    @property
    def current(self) -> bool:
        """``covered``'s id sets are this prefix's (no later prefix grew them)."""
        return self.covered.cut == self.cut


@dataclass(frozen=True, slots=True)
class _Tail:
    """What the pipeline gives a suffix joined to a prefix: its API messages (the leading user message of a
    tool-round cut dropped), its repairs, and the suffix's own request (whose other fields the joined
    request keeps)."""

    messages: list[MessageParam | SystemMessageParam]
    repairs: tuple[Repair, ...]
    request: MessagesRequest


class RequestBuilder:
    """Builds the requests of ONE session whose history only grows (see the module docstring).

    ``build(history)`` equals ``to_api_request(history)`` and its validation, whatever the history; the
    builder only remembers a prefix, which it drops when ``history[:cut]`` is no longer the same.
    """

    def __init__(
        self,
        *,
        options: NormalizeOptions,
        clock: Clock = utc_now,
        ids: IdSource = random_uuid,
        reanchor_after: int = REANCHOR_AFTER,
        incremental_from: int = INCREMENTAL_FROM,
    ) -> None:
        self.options = options
        self.clock = clock
        self.ids = ids
        self.reanchor_after = reanchor_after
        self.incremental_from = incremental_from
        self._suffix_options = options.model_copy(update={"user_context": None})
        self._prefix: _Prefix | None = None
        self._enabled = not options.snip and not (options.toolref_defer and options.tool_search_enabled)
        self._scanned = 0
        """How many messages of the history ``_system_role`` covers (``_scanned_last`` is the last of them)."""
        self._scanned_last: Message | None = None
        self._system_role = False

    def build(self, history: Sequence[Message]) -> BuiltRequest:
        """The request for ``history`` and its violations. Raises what ``to_api_request`` raises."""
        if len(history) < self.incremental_from or self._has_system_role_attachments(history):
            # role "system" messages are placed over the whole history (per-turn output_config compares
            # each turn with the one before): no prefix/suffix split for such a history.
            return self._full(history)
        prefix = self._current_prefix(history)
        if isinstance(prefix, BuiltRequest):
            return prefix
        if prefix is not None:
            spliced = self._splice(prefix, history)
            if spliced is not None:
                return spliced
        return self._full(history)

    def _has_system_role_attachments(self, history: Sequence[Message]) -> bool:
        """``has_system_role_attachments(history)``, scanning only the messages added since the last build
        (the answer cannot turn False as the history grows); the whole history again when the messages
        already scanned are not the same (checked by the last one's identity, as the prefix's anchor is)."""
        scanned = self._scanned
        if scanned > len(history) or (scanned and history[scanned - 1] is not self._scanned_last):
            scanned, self._system_role = 0, False
        if not self._system_role and scanned < len(history):
            self._system_role = has_system_role_attachments(history[scanned:])
        self._scanned, self._scanned_last = len(history), history[-1] if history else None
        return self._system_role

    def _full(self, history: Sequence[Message]) -> BuiltRequest:
        result = to_api_request(history, options=self.options, clock=self.clock, ids=self.ids)
        return BuiltRequest(result, validate_request(result.request, options=self.options), spliced=False)

    def _current_prefix(self, history: Sequence[Message]) -> _Prefix | BuiltRequest | None:
        """The prefix to splice ``history`` against, moved forward first when its suffix grew too long; or,
        when it moves onto the request's own last message, the request itself (``_splice_moving``)."""
        if not self._enabled:
            return None
        prefix = self._prefix
        if prefix is not None and not (prefix.cut < len(history) and history[prefix.cut - 1] is prefix.anchor):
            prefix = self._prefix = None
        # After a tool-round cut a new turn moves the open turn (thinking rules) off the prefix's tail:
        # such a prefix can no longer split, so it moves forward or goes.
        stale = prefix is not None and prefix.round_cut and any(map(is_human_prompt, history[prefix.cut :]))
        due = prefix is None or stale or len(history) - prefix.cut > self.reanchor_after
        # A request that ends on a human prompt moves the prefix onto it at no extra cost, whatever the suffix's
        # length: the one pipeline run over the span and the prompt that builds the request moves it too
        # (``_splice_moving``), and the next requests normalize a shorter suffix (prompt mix: 3 messages a
        # request instead of 3 and 5 in turn).
        onto_prompt = not due and prefix is not None and len(history) - 1 > prefix.cut and is_human_prompt(history[-1])
        if due or onto_prompt:
            moved = None
            cut = (
                _latest_cut(history, after=0)
                if prefix is None
                else _latest_cut(history, after=prefix.cut, start=prefix.cut)
            )
            if cut is not None and prefix is not None and not stale:
                if cut == len(history) - 1 and (built := self._splice_moving(prefix, history)) is not None:
                    return built
                if onto_prompt:
                    return prefix  # not due: no separate run to move it
                moved = self._advance(prefix, history, cut)
            if cut is not None and moved is None:
                moved = self._anchor(history, cut)
            if moved is not None:
                prefix = self._prefix = moved
            elif stale:
                prefix = self._prefix = None
        return prefix

    # ------------------------------------------------------------------------------------------ the cut
    def _anchor(self, history: Sequence[Message], cut: int) -> _Prefix | None:
        """The prefix ending before ``H[cut]`` (a turn or tool round that closes every call before it), if
        the pipeline splits there: the pipeline runs over the whole head and a stand-in for ``H[cut]``."""
        head = history[:cut]
        round_cut = isinstance(history[cut], AssistantMessage)
        try:
            if round_cut:
                with_stand_in = to_api_request(
                    [*head, _stand_in_reply(self.clock, self.ids)], options=self.options, clock=self.clock, ids=self.ids
                )
            else:
                with_stand_in = to_api_request(
                    head, options=self.options, prompt=STAND_IN_PROMPT, clock=self.clock, ids=self.ids
                )
        except AgentbusError:
            return None
        messages = with_stand_in.request["messages"]
        repairs = with_stand_in.report.repairs
        if (
            not _seam_holds(messages, round_cut=round_cut)
            or _breaks_split(repairs)
            or validate_request(with_stand_in.request, options=self.options, allow_prefill=round_cut)
        ):
            return None
        params = messages[:-1]
        tombstone_targets = _tombstone_targets(head)
        if tombstone_targets is None:
            return None
        covered = _Covered(
            cut=cut,
            params=params,
            repairs=list(repairs),
            uuids=set(_uuids(head)),
            message_ids=_message_ids(head),
            tool_use_ids={tid for message in head for tid in tool_use_ids(message)},
            referenced_tool_ids=_referenced_tool_ids(head),
            tombstone_targets=set(tombstone_targets),
            request_tool_ids=_request_tool_ids(params),
        )
        return _Prefix(
            cut=cut,
            round_cut=round_cut,
            anchor=history[cut - 1],
            covered=covered,
            param_count=len(params),
            repair_count=len(repairs),
            whitespace_pass_fired=_fired(repairs, RepairKind.WHITESPACE_ASSISTANT_DROPPED),
            media=sum(_media_count(param) for param in params),
        )

    def _advance(self, prefix: _Prefix, history: Sequence[Message], cut: int) -> _Prefix | None:
        """The prefix moved forward to ``cut`` without running the pipeline over the whole head: the span
        ``H[prefix.cut:cut]`` and a stand-in for ``H[cut]`` are joined to the prefix exactly as a request's
        suffix is (``_join``), since the prefix for ``cut`` is the pipeline's output for ``H[:cut]`` and
        the stand-in, less the stand-in. None: anchor in full."""
        round_cut = isinstance(history[cut], AssistantMessage)
        if prefix.round_cut and not round_cut:
            return None  # the stand-in prompt starts a new turn after a tool-round cut (see _current_prefix)
        span = history[prefix.cut : cut]
        if round_cut:
            joined = self._join(prefix, span, stand_in=_stand_in_reply(self.clock, self.ids))
        else:
            joined = self._join(prefix, span, prompt=STAND_IN_PROMPT)
        if joined is None:
            return None
        if not _seam_holds(joined.messages, round_cut=round_cut):
            return None
        return _extended(prefix, history, cut, joined.messages[:-1], joined.repairs)

    def _splice_moving(self, prefix: _Prefix, history: Sequence[Message]) -> BuiltRequest | None:
        """The request for ``history`` when the prefix is due to move onto its last message, a human prompt:
        one pipeline run, over the span and the prompt, both splices the request and moves the prefix.

        Moving first would run the pipeline twice, over the span and a stand-in prompt, then over the prompt
        alone. The prompt is the stand-in's equal when it comes out as the stand-in must (``_seam_holds``):
        alone, right after an assistant message, its text unchanged, no repair made to it; then what the span
        came to is what it comes to before the stand-in. Otherwise the prefix moves the usual way (None)."""
        prompt = history[-1]
        if prefix.round_cut or not isinstance(prompt, UserMessage) or not isinstance(prompt.message.content, str):
            return None
        joined = self._join(prefix, history[prefix.cut :])
        if joined is None:
            return None
        itself: MessageParam = {"role": "user", "content": prompt.message.content}
        if not _seam_holds(joined.messages, round_cut=False, stand_in=itself) or any(
            repair.message_uuid == prompt.uuid for repair in joined.repairs
        ):
            return None
        moved = _extended(prefix, history, len(history) - 1, joined.messages[:-1], joined.repairs)
        if moved is None:
            return None
        self._prefix = moved
        return self._spliced(prefix, joined)

    # ------------------------------------------------------------------------------------------ splice
    def _splice(self, prefix: _Prefix, history: Sequence[Message]) -> BuiltRequest | None:
        joined = self._join(prefix, history[prefix.cut :])
        return None if joined is None else self._spliced(prefix, joined)

    @staticmethod
    def _spliced(prefix: _Prefix, joined: _Tail) -> BuiltRequest:
        messages = prefix.params  # a copy: its own list
        messages.extend(joined.messages)
        request: MessagesRequest = {**joined.request, "messages": messages}
        # The repairs are the prefix's and the pipeline's own Repair objects, validated when made.
        report = NormalizationReport.model_construct(repairs=(*prefix.repairs, *joined.repairs))
        return BuiltRequest(NormalizedRequest(request=request, report=report), [], spliced=True, prefix=prefix)

    def _join(
        self,
        prefix: _Prefix,
        suffix: Sequence[Message],
        *,
        prompt: str | None = None,
        stand_in: AssistantMessage | None = None,
    ) -> _Tail | None:
        """The API messages and repairs the pipeline gives ``suffix`` (then ``prompt`` or ``stand_in``, when
        the prefix is being moved) after the prefix, when the split conditions hold; None otherwise."""
        if not _suffix_separable(prefix, suffix):
            return None
        tail_history = [*suffix, stand_in] if stand_in is not None else suffix
        try:
            tail = to_api_request(
                tail_history, options=self._suffix_options, prompt=prompt, clock=self.clock, ids=self.ids
            )
        except AgentbusError:
            return None  # the full run raises the error with its own numbering
        tail_messages = tail.request["messages"]
        repairs = tail.report.repairs
        if prefix.round_cut:
            # The suffix starts with an assistant reply: the pipeline put the "(no content)" leading user
            # message first (API §1.6), which the full request does not have — it continues the prefix.
            leading = [r for r in repairs if r.kind is RepairKind.LEADING_USER_INSERTED]
            if len(leading) != 1 or tail_messages[:1] != [_LEADING_USER_PARAM] or len(tail_messages) < 2:
                return None
            tail_messages = tail_messages[1:]
            repairs = tuple(r for r in repairs if r is not leading[0])
        if (
            not tail_messages
            or tail_messages[0]["role"] != ("assistant" if prefix.round_cut else "user")
            or _breaks_split(repairs)
            or _fired(repairs, RepairKind.WHITESPACE_ASSISTANT_DROPPED) != prefix.whitespace_pass_fired
        ):
            return None
        media = prefix.media + sum(_media_count(param) for param in tail_messages)
        tail_tool_ids = _request_tool_ids(tail_messages)
        if media > min(self.options.media_limit, MAX_MEDIA_ITEMS) or not prefix.covered.request_tool_ids.isdisjoint(
            tail_tool_ids
        ):
            return None
        # The suffix's own request (for a tool-round cut: with its leading user message) validates the
        # suffix side, the prefix's own validation the prefix side: the open turn is the same on both
        # (a tool-round cut is refused once a new turn begins), so the joined request is valid when both
        # are. A request that does not pass is rebuilt in full: the violations reported are the full one's.
        if validate_request(tail.request, options=self.options, allow_prefill=stand_in is not None):
            return None
        return _Tail(tail_messages, repairs, tail.request)


# ---------------------------------------------------------------------------------------------- rules
def _extended(
    prefix: _Prefix,
    history: Sequence[Message],
    cut: int,
    params: list[MessageParam | SystemMessageParam],
    repairs: tuple[Repair, ...],
) -> _Prefix | None:
    """``prefix`` moved forward to ``cut``: ``params`` and ``repairs`` are what the pipeline made of the span
    ``history[prefix.cut:cut]`` after it. None when a tombstone of the span targets a uuid-less message.

    The span's share is added to ``prefix.covered`` in place (O(span), see ``_Covered``). None as well for a
    prefix that is no longer the newest (never the builder's, which only moves its current prefix)."""
    span = history[prefix.cut : cut]
    span_targets = _tombstone_targets(span)
    if span_targets is None:
        return None
    if not prefix.current:
        return None  # its id sets are gone (grown by a later prefix): anchor in full
    covered = prefix.covered
    covered.cut = cut
    covered.params.extend(params)
    covered.repairs.extend(repairs)
    covered.uuids.update(_uuids(span))
    covered.message_ids.update(_message_ids(span))
    covered.tool_use_ids.update(tid for message in span for tid in tool_use_ids(message))
    covered.referenced_tool_ids.update(_referenced_tool_ids(span))
    covered.tombstone_targets.update(span_targets)
    covered.request_tool_ids.update(_request_tool_ids(params))
    return _Prefix(
        cut=cut,
        round_cut=isinstance(history[cut], AssistantMessage),
        anchor=history[cut - 1],
        covered=covered,
        param_count=len(covered.params),
        repair_count=len(covered.repairs),
        whitespace_pass_fired=prefix.whitespace_pass_fired,
        media=prefix.media + sum(_media_count(param) for param in params),
    )


def _starts_with(messages: Sequence[object], params: Sequence[object], count: int) -> bool:
    """``messages[:count]`` are the very objects ``params[:count]`` (the request's list was not edited)."""
    # map(is_) compares in C: the prefix grows with the session, a generator would run Python per message.
    return len(messages) >= count and len(params) >= count and all(map(is_, messages[:count], params[:count]))


def _stand_in_reply(clock: Clock, ids: IdSource) -> AssistantMessage:
    return create_assistant_message(STAND_IN_REPLY, clock=clock, ids=ids)


def is_human_prompt(message: Message) -> bool:
    """A prompt a person typed: a user message that is not meta or virtual, answers no tool call and
    says something."""
    if not isinstance(message, UserMessage) or message.is_meta or message.is_virtual or message.uuid is None:
        return False
    content = message.message.content
    if isinstance(content, str):
        return bool(content.strip())
    if any(isinstance(block, ToolResultBlock) for block in content):
        return False
    return any(isinstance(block, TextBlock) and block.text.strip() for block in content)


def is_round_start(history: Sequence[Message], index: int) -> bool:
    """``history[index]`` is an assistant reply that follows the tool results of the previous round."""
    if index == 0 or not isinstance(history[index], AssistantMessage):
        return False
    previous = history[index - 1]
    return isinstance(previous, UserMessage) and bool(tool_result_ids(previous))


def _latest_cut(history: Sequence[Message], *, after: int, start: int = 0) -> int | None:
    """The largest ``k > after`` where a turn (human prompt) or a tool round starts and every call of
    ``history[:k]`` is answered inside it. ``start``: a cut already known (every call before it is
    answered before it), where the scan may begin."""
    open_calls: set[str] = set()
    latest: int | None = None
    for index in range(start, len(history)):
        message = history[index]
        if index > after and not open_calls and (is_human_prompt(message) or is_round_start(history, index)):
            latest = index
        open_calls.update(tool_use_ids(message))
        open_calls.difference_update(tool_result_ids(message))
    return latest


def _suffix_separable(prefix: _Prefix, suffix: Sequence[Message]) -> bool:
    """The cross-cut conditions of the module docstring, checked on the suffix (O(len(suffix))); a new turn
    after a tool-round cut is handled by ``_current_prefix``."""
    if not prefix.current:
        return False  # the id sets are a later prefix's (see _Covered)
    covered = prefix.covered
    first = suffix[0]
    if not (isinstance(first, AssistantMessage) if prefix.round_cut else is_human_prompt(first)):
        return False
    targets = _tombstone_targets(suffix)
    if targets is None or not targets.isdisjoint(covered.uuids) or field_or_none(first, "uuid") in targets:
        return False
    suffix_uuids = set(_uuids(suffix))
    if not suffix_uuids.isdisjoint(covered.uuids) or not suffix_uuids.isdisjoint(covered.tombstone_targets):
        return False
    if not covered.message_ids.isdisjoint(_message_ids(suffix)):
        return False
    calls = {tid for message in suffix for tid in tool_use_ids(message)}
    if not calls.isdisjoint(covered.tool_use_ids) or not calls.isdisjoint(covered.referenced_tool_ids):
        return False
    if not covered.tool_use_ids.isdisjoint(_referenced_tool_ids(suffix)):
        return False
    return not any(isinstance(message, CompactBoundarySystemMessage) for message in suffix)


def _seam_holds(
    messages: Sequence[MessageParam | SystemMessageParam], *, round_cut: bool, stand_in: MessageParam | None = None
) -> bool:
    """The stand-in (the last of ``messages``: ``stand_in``, or our stand-in prompt or reply) came out alone, right
    after a message of the other role: nothing was folded into it, so what precedes it is the prefix."""
    expected = stand_in if stand_in is not None else _STAND_IN_REPLY_PARAM if round_cut else _STAND_IN_PROMPT_PARAM
    return (
        len(messages) >= 2
        and messages[-1] == expected
        and messages[-2]["role"] == ("user" if round_cut else "assistant")
    )


def _breaks_split(repairs: Iterable[Repair]) -> bool:
    return any(repair.kind in _SPLIT_BREAKERS for repair in repairs)


def _fired(repairs: Iterable[Repair], kind: RepairKind) -> bool:
    return any(repair.kind is kind for repair in repairs)


def _uuids(messages: Iterable[Message]) -> Iterable[str]:
    for message in messages:
        uuid = field_or_none(message, "uuid")
        if isinstance(uuid, str):
            yield uuid


def _message_ids(messages: Iterable[Message]) -> set[str]:
    return {m.message.id for m in messages if isinstance(m, AssistantMessage) and m.message.id is not None}


def _referenced_tool_ids(messages: Iterable[Message]) -> set[str]:
    """Tool ids a message answers or points at (tool results, progress, sub-agent lines)."""
    referenced: set[str] = set()
    for message in messages:
        referenced.update(tool_result_ids(message))
        for field_name in ("tool_use_id", "parent_tool_use_id"):
            value = field_or_none(message, field_name)
            if isinstance(value, str):
                referenced.add(value)
    return referenced


def _tombstone_targets(messages: Sequence[Message]) -> frozenset[str] | None:
    """The uuids the tombstones of ``messages`` retract (R6.3); None when one targets a uuid-less message
    (matched by equality, which the uuid sets cannot check across the cut)."""
    tombstones = [message for message in messages if isinstance(message, TombstoneMessage)]
    if any(not isinstance(field_or_none(tombstone.message, "uuid"), str) for tombstone in tombstones):
        return None
    return frozenset(retracted_uuids(tombstones))


def _blocks(param: MessageParam | SystemMessageParam) -> list[Mapping[str, object]]:
    content = param["content"]
    return [block for block in content if isinstance(block, Mapping)] if isinstance(content, list) else []


def _request_tool_ids(params: Iterable[MessageParam | SystemMessageParam]) -> set[str]:
    return {
        block_id
        for param in params
        for block in _blocks(param)
        if (block.get("type") == "tool_use" or block.get("type") in SERVER_TOOL_USE_TYPES)
        and isinstance(block_id := block.get("id"), str)
    }


def _media_count(param: MessageParam | SystemMessageParam) -> int:
    """Images and documents, top level and inside tool_result content (R4.23's count)."""
    count = 0
    for block in _blocks(param):
        count += block.get("type") in MEDIA_TYPES
        nested = block.get("content") if block.get("type") == "tool_result" else None
        if isinstance(nested, list):
            count += sum(1 for item in nested if isinstance(item, Mapping) and item.get("type") in MEDIA_TYPES)
    return count
