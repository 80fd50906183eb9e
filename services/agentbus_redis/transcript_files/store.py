"""``TranscriptStore``: Claude-Code-compatible incremental recording of sessions (R7.2–R7.13).

One store per data root (``AGENTBUS_DATA_DIR``; Claude Code's ``~/.claude`` works too). Per session it
keeps the set of uuids already in the session file (loaded once from disk, R7.7), so recording the same
message twice (a redelivered bus entry, a resumed history) writes nothing. Parents are assigned by the
chain-participant rules (R7.8); sidechain messages go to the sub-agent file without de-dup (R7.9).

Tombstone removal (R7.13) cuts the line but keeps its uuid in the de-dup set, so a redelivery of the
retracted message cannot bring it back. When the cut line was the chain's end (a half-streamed reply
tombstoned after a stream fallback or a crashed model call), the chain end goes back to where it stood
before that line, so the next message hangs off a line that is in the file, as the log's own chain does
(``bus/ledger.py`` restores its chain parent on a fallback).

Every ``record`` call is appended as one batch through :class:`~agentbus_redis.transcript_files.writer.DurableJsonlFile`
and returns once the batch is durable (group fsync; with ``sync="syncfs"``, the default where it reports
errors, one ``syncfs`` per filesystem covers every file of a batch: ``filesystem_sync.py``). asyncio only:
use one store per event loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import orjson

from agentbus_redis.agents.ids import parse_child_session
from agentbus_redis.json_types import JsonObject
from agentbus_redis.messages.kinds import AssistantMessage, Message, UserMessage
from agentbus_redis.transcript.lines import TranscriptLine, dump_line
from agentbus_redis.transcript.unicode_text import decode_utf8_replacing
from agentbus_redis.transcript_files.cleaning import (
    CleaningPolicy,
    PersistableMessage,
    clean_messages_for_logging,
)
from agentbus_redis.transcript_files.filesystem_sync import FilesystemSync, syncfs_supported
from agentbus_redis.transcript_files.layout import (
    PROJECTS_DIR,
    legacy_session_file,
    session_file,
    subagent_file,
    write_subagent_meta,
)
from agentbus_redis.transcript_files.lines import SessionStamp, dumps_line
from agentbus_redis.transcript_files.logged_wire import LoggedWires
from agentbus_redis.transcript_files.recording import (
    TeamInfo,
    build_chain_lines,
    preserved_prelude,
    split_recorded_prefix,
)
from agentbus_redis.transcript_files.removal import (
    MAX_REWRITE_BYTES,
    TAIL_WINDOW_BYTES,
    RemovalResult,
    remove_line_by_uuid,
    uuid_needle,
)
from agentbus_redis.transcript_files.session_lock import DEFAULT_LOCK_TIMEOUT_S, SessionLock
from agentbus_redis.transcript_files.tail_recovery import TornTail, report_torn_tail
from agentbus_redis.transcript_files.writer import DEFAULT_MIN_SYNC_INTERVAL_S, FSYNC_POOL, DurableJsonlFile

_CHAIN_TYPES = frozenset({"user", "assistant", "attachment", "system"})
RECENT_CHAIN_SIZE = 512
"""Chain participants (and removed lines) a session's state remembers for a rewind: a tombstone retracts the
latest reply's lines, far fewer than this."""


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """How lines are stamped and cleaned and how hard the store syncs."""

    stamp: SessionStamp = field(default_factory=SessionStamp)
    cleaning: CleaningPolicy = field(default_factory=CleaningPolicy)
    min_sync_interval_s: float = DEFAULT_MIN_SYNC_INTERVAL_S
    tail_window_bytes: int = TAIL_WINDOW_BYTES
    max_rewrite_bytes: int = MAX_REWRITE_BYTES
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S
    """How long opening a session waits for another writer's lock (``session_lock.py``)."""
    sync: Literal["syncfs", "fsync"] = "syncfs"
    """How appends are made durable: shared ``syncfs`` rounds (where the kernel reports their errors, else
    ``fsync``) or one ``fsync`` per file."""


@dataclass(frozen=True, slots=True)
class RecordResult:
    """What one ``record`` call did."""

    last_uuid: str | None
    """R7.7 step 5: the last *new* chain participant, else the starting parent, else ``None``; pass it
    as ``parent_hint`` of the next call."""
    written: tuple[str, ...]
    """Uuids of the lines appended (or buffered), in order."""
    skipped: tuple[str, ...]
    """Uuids already in the session (the de-dup no-ops)."""
    path: Path
    durable: bool
    """False only while the session file is not materialized yet (R7.2: lines held in memory)."""


@dataclass(slots=True)
class _SessionState:
    session_id: str
    file: DurableJsonlFile
    uuids: set[str]
    last_chain_uuid: str | None
    materialized: bool
    buffered: list[str] = field(default_factory=list)
    buffered_uuids: list[str | None] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    writer_lock: SessionLock | None = None
    """The cross-process lock on the session, held from before the file was read until it is closed."""
    agent_id: str | None = None
    """A sub-agent's child session (A4): its lines are sidechain lines of this agentId."""
    stamp_session_id: str | None = None
    """The ``sessionId`` stamped on its lines: the session's own, or for a child its root session's (A4.2)."""
    predecessors: OrderedDict[str, str | None] = field(default_factory=OrderedDict)
    """The recent chain participants this store wrote, each with the chain end before it (bounded)."""
    removed: OrderedDict[str, None] = field(default_factory=OrderedDict)
    """The recent participants whose lines were removed (bounded)."""

    def remember_chain(self, predecessors: Iterable[tuple[str, str | None]]) -> None:
        for uuid, before in predecessors:
            self.predecessors[uuid] = before
        while len(self.predecessors) > RECENT_CHAIN_SIZE:
            self.predecessors.popitem(last=False)

    def rewind_chain(self, removed_uuid: str) -> bool:
        """``removed_uuid``'s line is gone: move the chain end back past every removed line. False when a
        line the walk needs was written before this state was loaded (its predecessor is unknown here)."""
        self.removed[removed_uuid] = None
        while len(self.removed) > RECENT_CHAIN_SIZE:
            self.removed.popitem(last=False)
        while self.last_chain_uuid is not None and self.last_chain_uuid in self.removed:
            if self.last_chain_uuid not in self.predecessors:
                return False
            self.last_chain_uuid = self.predecessors[self.last_chain_uuid]
        return True

    async def close(self) -> None:
        try:
            await self.file.close()
        finally:
            if self.writer_lock is not None:
                self.writer_lock.release()


def _json_value(raw: bytes) -> object:
    """One line's JSON value, ``None`` when it is not JSON. orjson refuses what the reader accepts (an
    invalid UTF-8 byte, a lone surrogate escape, issue 15), so those lines are read the reader's way:
    bytes decoded with U+FFFD, then the standard parser; their uuid still counts for de-dup and chain."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(decode_utf8_replacing(raw)[0])
    except ValueError:
        return None


def _scan_session_file(path: Path, *, sidechain: bool = False) -> tuple[set[str], str | None]:
    """The uuids of every message line in ``path`` and the uuid of the last chain participant (of the
    main chain; of the sidechain in a sub-agent file)."""
    uuids: set[str] = set()
    last: str | None = None
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return uuids, last
    for raw in data.split(b"\n"):
        if b'"uuid"' not in raw:
            continue
        value = _json_value(raw)
        if not isinstance(value, dict):
            continue
        uuid = value.get("uuid")
        if isinstance(uuid, str):
            uuids.add(uuid)
            if value.get("type") in _CHAIN_TYPES and (value.get("isSidechain") is True) == sidechain:
                last = uuid
    return uuids, last


class TranscriptStore:
    """Claude Code's transcript write path over one data root (see the module docstring)."""

    def __init__(
        self,
        root: Path,
        config: StoreConfig | None = None,
        *,
        on_torn_tail: Callable[[TornTail], None] | None = None,
    ) -> None:
        self.root = root
        self.config = config or StoreConfig()
        self._on_torn_tail = on_torn_tail
        self._sessions: dict[str, _SessionState] = {}
        self._other_files: dict[Path, DurableJsonlFile] = {}
        self._opening: dict[str, asyncio.Future[None]] = {}
        """Sessions being opened now (done when the attempt ends): a second caller waits for it."""
        use_syncfs = self.config.sync == "syncfs" and syncfs_supported()
        self._filesystem_sync = FilesystemSync(FSYNC_POOL) if use_syncfs else None

    # ------------------------------------------------------------------ files and sessions
    def _file(self, path: Path, session_id: str | None) -> DurableJsonlFile:
        return DurableJsonlFile(
            path,
            min_sync_interval_s=self.config.min_sync_interval_s,
            on_torn_tail=functools.partial(self._torn_tail, session_id),
            filesystem_sync=self._filesystem_sync,
        )

    def _torn_tail(self, session_id: str | None, torn: TornTail) -> None:
        """Every torn tail is logged and counted; the constructor's callback (tests) sees it too."""
        report_torn_tail(torn, session_id=session_id)
        if self._on_torn_tail is not None:
            self._on_torn_tail(torn)

    def _path_file(self, path: Path, session_id: str | None) -> DurableJsonlFile:
        """The appender of a file that is not a main session file (sub-agent files, written-back files)."""
        file = self._other_files.get(path)
        if file is None:
            file = self._other_files[path] = self._file(path, session_id)
        return file

    def _locate_session_file(self, session_id: str, cwd: str) -> Path:
        """The file under ``cwd``'s project dir, unless the session already lives in another one (a
        session keeps its pinned project dir, R7.1)."""
        preferred = session_file(self.root, cwd, session_id)
        if preferred.exists():
            return preferred
        projects = self.root / PROJECTS_DIR
        if projects.is_dir():
            # Its Claude Code UUID first; then the bus id, the name agentbus gave files before issue 26.
            for name in dict.fromkeys((preferred.name, legacy_session_file(self.root, cwd, session_id).name)):
                for existing in sorted(projects.glob(f"*/{name}")):
                    return existing
        return preferred

    async def _session(self, session_id: str, cwd: str) -> _SessionState:
        while (opening := self._opening.get(session_id)) is not None:
            await asyncio.wait([opening])
        state = self._sessions.get(session_id)
        if state is not None:
            return state
        # Sessions open concurrently (one worker-thread hop each): a batch starting 200 sessions
        # used to open them one after another behind a store-wide lock, two hops each. If this
        # attempt fails, a caller that waited for it tries again.
        opening = self._opening[session_id] = asyncio.get_running_loop().create_future()
        try:
            state = await asyncio.to_thread(self._open_session, session_id, cwd)
            self._sessions[session_id] = state
            return state
        finally:
            del self._opening[session_id]
            opening.set_result(None)

    def _open_session(self, session_id: str, cwd: str) -> _SessionState:
        """(In a worker thread.) Lock the session against other writers, then find its file, repair a torn
        tail, read its uuids and chain end."""
        writer_lock = SessionLock.acquire(self.root, session_id, timeout_s=self.config.lock_timeout_s)
        child = parse_child_session(session_id)
        try:
            root_file = self._locate_session_file(session_id if child is None else child.root_session_id, cwd)
            path = root_file if child is None else self.subagent_path(session_id, cwd)
            file = self._file(path, session_id)
            file.recover()
            uuids, last = _scan_session_file(path, sidechain=child is not None)
        except BaseException:
            writer_lock.release()
            raise
        return _SessionState(
            session_id,
            file,
            uuids,
            last,
            materialized=path.exists(),
            writer_lock=writer_lock,
            agent_id=child.agent_id if child is not None else None,
            # Claude Code's invariant: a line's sessionId names the file of its (root) session.
            stamp_session_id=root_file.stem,
        )

    def subagent_path(self, child_session_id: str, cwd: str) -> Path:
        """A4.1: a child session's transcript, ``<root>/subagents/agent-<agentId>.jsonl`` beside its root
        session's file (wherever that file is pinned)."""
        child = parse_child_session(child_session_id)
        if child is None:
            raise ValueError(f"{child_session_id!r} is not a sub-agent session")
        root_file = self._locate_session_file(child.root_session_id, cwd)
        return root_file.with_suffix("") / "subagents" / f"agent-{child.agent_id}.jsonl"

    def session_path(self, session_id: str, cwd: str) -> Path:
        """Where ``session_id`` is (or would be) recorded."""
        state = self._sessions.get(session_id)
        if state is not None:
            return state.file.path
        if parse_child_session(session_id) is not None:
            return self.subagent_path(session_id, cwd)
        return self._locate_session_file(session_id, cwd)

    # ------------------------------------------------------------------ recording
    async def record(
        self,
        session_id: str,
        messages: Sequence[Message],
        *,
        cwd: str,
        parent_hint: str | None = None,
        continue_chain: bool = False,
        history: Sequence[Message] | None = None,
        all_messages: Sequence[Message] | None = None,
        team_name: str | None = None,
        agent_name: str | None = None,
        prompt_id: str | None = None,
        recorded: bool = False,
        wires: LoggedWires | None = None,
    ) -> RecordResult:
        """R7.7 ``recordTranscript``: append the messages of ``messages`` not yet in the session.

        ``recorded``: the messages come from a replayed recording; its attachments are written as well
        (:attr:`CleaningPolicy.keep_attachments`).

        ``parent_hint`` is the starting parent (overridden by a recorded prefix, R7.7 step 3);
        ``continue_chain`` uses the session's last recorded chain participant when no hint is given.
        ``history`` is the in-memory conversation the batch belongs to: before a new compact boundary with a
        preserved segment, ``history`` up to the segment tail is recorded first (R7.11, headless). When the
        segment is inside the batch itself (after the boundary), that segment is written first instead.
        ``all_messages`` is where REPL tool ids are collected from (R7.5). ``wires``: the wire objects of
        messages read from the log, as logged (``logged_wire.py``): their lines are built from them.
        """
        state = await self._session(session_id, cwd)
        pending: list[asyncio.Future[None]] = []
        team = TeamInfo(team_name, agent_name, prompt_id)
        async with state.lock:
            hint = parent_hint if parent_hint is not None or not continue_chain else state.last_chain_uuid
            result = self._record_locked(
                state, messages, cwd, hint, history, all_messages, team, pending, recorded, wires
            )
        for future in pending:
            await future
        return result

    def record_ready(
        self,
        session_id: str,
        messages: Sequence[Message],
        *,
        cwd: str,
        recorded: bool = False,
        wires: LoggedWires | None = None,
    ) -> tuple[RecordResult, list[asyncio.Future[None]]] | None:
        """``record(session_id, messages, cwd=cwd, continue_chain=True, recorded=recorded, wires=wires)`` done
        now when it can be: the session is open and nobody holds its lock. Returns the result and the futures to await
        before the lines count as durable; ``None`` (nothing done) when the caller must await ``record``.

        Why: the transcript worker records every session of a batch; a task, a lock and an await per session
        cost more CPU than the lines of a typical batch (~4 a session). Without an await the call cannot
        interleave with another holder of the lock, so not taking it keeps the same exclusion."""
        state = self._sessions.get(session_id)
        if state is None or session_id in self._opening or state.lock.locked():
            return None
        pending: list[asyncio.Future[None]] = []
        hint = state.last_chain_uuid
        result = self._record_locked(state, messages, cwd, hint, None, None, TeamInfo(), pending, recorded, wires)
        return result, pending

    def _record_locked(
        self,
        state: _SessionState,
        messages: Sequence[Message],
        cwd: str,
        hint: str | None,
        history: Sequence[Message] | None,
        all_messages: Sequence[Message] | None,
        team: TeamInfo,
        pending: list[asyncio.Future[None]],
        recorded: bool,
        wires: LoggedWires | None = None,
    ) -> RecordResult:
        """``record``'s work under the session's lock, without awaiting: the lines are written on return."""
        cleaning = dataclasses.replace(self.config.cleaning, keep_attachments=True) if recorded else None
        prelude, from_history = preserved_prelude(messages, history, state.uuids)
        earlier: tuple[str, ...] = ()
        if prelude:
            # A segment taken from the batch is written as the continuation of the session so far.
            prelude_hint = hint if from_history or hint is not None else state.last_chain_uuid
            earlier = self._record_now(
                state, prelude, cwd, prelude_hint, all_messages, team, pending, cleaning, wires
            ).written
        result = self._record_now(state, messages, cwd, hint, all_messages, team, pending, cleaning, wires)
        if earlier:
            result = dataclasses.replace(result, written=(*earlier, *result.written))
        return result

    def _record_now(
        self,
        state: _SessionState,
        messages: Sequence[Message],
        cwd: str,
        parent_hint: str | None,
        all_messages: Sequence[Message] | None,
        team: TeamInfo,
        pending: list[asyncio.Future[None]],
        cleaning: CleaningPolicy | None = None,
        wires: LoggedWires | None = None,
    ) -> RecordResult:
        """R7.7 steps 1–5 without awaiting: the batch is written before this returns."""
        policy = cleaning if cleaning is not None else self.config.cleaning
        cleaned = clean_messages_for_logging(messages, policy, all_messages=all_messages)
        split = split_recorded_prefix(cleaned, state.uuids, parent_hint)
        stamp_id = state.stamp_session_id or state.session_id
        stamp = self.config.stamp.values(cwd=cwd, session_id=stamp_id)  # git branch: once per batch
        chain = build_chain_lines(
            split.new, split.starting_parent, stamp=stamp, team=team, agent_id=state.agent_id, wires=wires
        )
        lines, written, last_new = chain.lines, chain.uuids, chain.last_participant
        kept = [(line, uuid) for line, uuid in zip(lines, written, strict=True) if self._claim(state, uuid)]
        kept_uuids = [uuid for _, uuid in kept]
        try:
            durable = self._append_session_lines(state, [line for line, _ in kept], split.new, kept_uuids, pending)
        except Exception:
            state.uuids.difference_update(kept_uuids)  # not written: a retry must write them
            raise
        if last_new is not None:
            state.last_chain_uuid = last_new
        state.remember_chain(chain.predecessors)
        return RecordResult(
            last_uuid=last_new if last_new is not None else split.starting_parent,
            written=tuple(kept_uuids),
            skipped=tuple(split.skipped),
            path=state.file.path,
            durable=durable,
        )

    @staticmethod
    def _claim(state: _SessionState, uuid: str) -> bool:
        """R7.9: a main-session line is written only if its uuid is new (then it is remembered)."""
        if uuid in state.uuids:
            return False
        state.uuids.add(uuid)
        return True

    def _append_session_lines(
        self,
        state: _SessionState,
        lines: list[str],
        messages: Sequence[PersistableMessage],
        uuids: list[str],
        pending: list[asyncio.Future[None]],
    ) -> bool:
        """R7.2/R7.9: buffer until the first batch holding a user or assistant message, then write the
        buffer and the batch as one append. True when the lines were appended (not buffered)."""
        if not state.materialized:
            if not any(isinstance(message, UserMessage | AssistantMessage) for message in messages):
                state.buffered.extend(lines)
                state.buffered_uuids.extend(uuids)
                return False
            lines = [*state.buffered, *lines]
            state.buffered.clear()
            state.buffered_uuids.clear()
            state.materialized = True
        if lines:
            pending.append(state.file.append(lines))
        return True

    async def append_metadata(self, session_id: str, entry: JsonObject, *, cwd: str) -> bool:
        """R7.4/R7.9: append a metadata line (``{"type": "custom-title", …}``); no de-dup. Buffered until
        the session file is materialized. True when it was written (durably) rather than buffered."""
        if not isinstance(entry.get("type"), str):
            msg = "a metadata entry needs a string `type`"
            raise ValueError(msg)
        state = await self._session(session_id, cwd)
        line = dumps_line({"type": entry["type"], **entry})
        async with state.lock:
            if not state.materialized:
                state.buffered.append(line)
                state.buffered_uuids.append(None)
                return False
            future = state.file.append([line])
        await future
        return True

    async def record_sidechain(
        self,
        session_id: str,
        agent_id: str,
        messages: Sequence[Message],
        *,
        cwd: str,
        starting_parent: str | None = None,
        subdir: str | None = None,
        team_name: str | None = None,
        agent_name: str | None = None,
    ) -> RecordResult:
        """R7.9/R7.11 ``recordSidechainTranscript``: every message goes to the sub-agent file
        (``isSidechain: true``, ``agentId``); no uuid de-dup, and the main set is untouched."""
        cleaned = clean_messages_for_logging(messages, self.config.cleaning)
        path = subagent_file(self.root, cwd, session_id, agent_id, subdir)
        file = self._path_file(path, session_id)
        stamp = self.config.stamp.values(cwd=cwd, session_id=session_id)
        team = TeamInfo(team_name, agent_name)
        chain = build_chain_lines(cleaned, starting_parent, stamp=stamp, team=team, agent_id=agent_id)
        if chain.lines:
            await file.append(chain.lines)
        return RecordResult(
            last_uuid=chain.last_participant if chain.last_participant is not None else starting_parent,
            written=tuple(chain.uuids),
            skipped=(),
            path=path,
            durable=True,
        )

    async def write_subagent_meta(
        self, session_id: str, agent_id: str, meta: JsonObject, *, cwd: str, subdir: str | None = None
    ) -> Path:
        """R7.1: the ``agent-<agentId>.meta.json`` sidecar (``{agentType, worktreePath?, description?}``,
        see :func:`~agentbus_redis.transcript_files.layout.subagent_meta`), written atomically."""
        path = subagent_file(self.root, cwd, session_id, agent_id, subdir)
        return await asyncio.to_thread(write_subagent_meta, path, meta)

    # ------------------------------------------------------------------ tombstones
    async def remove(
        self, session_id: str, uuid: str, *, cwd: str, agent_id: str | None = None, subdir: str | None = None
    ) -> RemovalResult:
        """R7.13 / R6.3: remove the line of ``uuid`` — first from the not-yet-written queue and the
        unmaterialized buffer (the [OBS] fix: a just-recorded target is never missed), then from disk."""
        if agent_id is not None:
            path = subagent_file(self.root, cwd, session_id, agent_id, subdir)
            return await self._remove_from_file(self._path_file(path, session_id), uuid)
        state = await self._session(session_id, cwd)
        async with state.lock:
            if uuid in state.buffered_uuids:
                index = state.buffered_uuids.index(uuid)
                line = state.buffered.pop(index)
                del state.buffered_uuids[index]
                result = RemovalResult(uuid, "buffered", len(line.encode("utf-8")) + 1)
            else:
                result = await self._remove_from_file(state.file, uuid)
            if result.removed and not state.rewind_chain(uuid):
                # Written before this process loaded the session: the file (durable, the line gone) says.
                await state.file.sync()
                sidechain = state.agent_id is not None
                _, state.last_chain_uuid = await asyncio.to_thread(
                    _scan_session_file, state.file.path, sidechain=sidechain
                )
            return result

    async def _remove_from_file(self, file: DurableJsonlFile, uuid: str) -> RemovalResult:
        needle = uuid_needle(uuid)
        if file.drop_queued_line(lambda line: needle in line):
            return RemovalResult(uuid, "queued")
        if not file.exists:
            return RemovalResult(uuid, "no_file")
        window, limit = self.config.tail_window_bytes, self.config.max_rewrite_bytes
        return await file.exclusive(
            lambda fd: remove_line_by_uuid(fd, uuid, tail_window_bytes=window, max_rewrite_bytes=limit)
        )

    # ------------------------------------------------------------------ whole files
    async def write_lines(self, path: Path, lines: Sequence[TranscriptLine]) -> int:
        """Append already-built transcript lines verbatim (no restamping, no de-dup) to ``path`` — e.g. a
        loaded file written back, or an imported session. Returns the number of lines; durable on return."""
        if lines:
            await self._path_file(path, None).append([dump_line(line) for line in lines])
        return len(lines)

    # ------------------------------------------------------------------ lifecycle
    async def flush(self) -> None:
        """Wait until every line appended so far (all sessions and agent files) is durable."""
        files = [state.file for state in self._sessions.values()] + list(self._other_files.values())
        await asyncio.gather(*(file.sync() for file in files))

    def cached_sessions(self) -> list[str]:
        """Ids of the sessions whose state (de-dup uuids, chain tail, open file) the store holds now."""
        return list(self._sessions)

    async def forget(self, session_ids: Iterable[str]) -> None:
        """Make durable and close the files of ``session_ids`` and drop what the store remembers of them,
        so their next ``record`` re-reads the file (R7.7 de-dup set and chain tail, torn-tail recovery):
        another writer, e.g. the next owner of the sessions' bus shard, may append to them meanwhile.
        Lines still buffered for an unmaterialized session (R7.2) are discarded, as by ``close``."""
        states = [state for session_id in session_ids if (state := self._sessions.pop(session_id, None))]

        async def close(state: _SessionState) -> None:
            async with state.lock:  # a record() in flight finishes its append first
                await state.close()

        await asyncio.gather(*(close(state) for state in states))

    async def close(self) -> None:
        """Flush and close every file. Lines still buffered for an unmaterialized session (no user or
        assistant message ever arrived, R7.2) are discarded, as in Claude Code."""
        await asyncio.gather(
            *(state.close() for state in self._sessions.values()),
            *(file.close() for file in self._other_files.values()),
        )
        self._sessions.clear()
        self._other_files.clear()
        if self._filesystem_sync is not None:
            self._filesystem_sync.close()
