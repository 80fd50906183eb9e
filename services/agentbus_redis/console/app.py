"""The console's HTTP app: static pages (``static/``: HTML, CSS and one script, no build step) over a JSON and
Server-Sent Events API of the bus. Every route but the login page, the static files and the probes needs a
token (console/access.py); every action needs the operator role and the login's CSRF token.

The page renders what the API returns as text (``textContent``), never as markup: model and producer text is
untrusted. No setting is ever returned (the tokens, the internal key, the API key stay in the process).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from importlib import resources
from typing import Any

import redis.asyncio as aioredis
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from agentbus_redis.config.settings import Settings
from agentbus_redis.console import queries
from agentbus_redis.console.access import COOKIE, Tokens
from agentbus_redis.console.live import approval_changes, session_rows
from agentbus_redis.runtime import redis_client
from agentbus_redis.sdk.approvals import PendingApproval, find_approval
from agentbus_redis.sdk.client import AgentbusClient
from agentbus_redis.session_ids import session_id_problem
from agentbus_redis.streams.deadletter import replay_dead_letter
from agentbus_redis.streams.topology import Topology
from agentbus_redis.subagents.tree import walk
from agentbus_redis.views.access import login_cookie, role_of_token
from agentbus_redis.views.paging import BadCursor
from agentbus_redis.views.states import SESSION_FILTERS

STATIC = resources.files("agentbus_redis.console") / "static"
NO_STORE = {"cache-control": "no-store"}
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
    "frame-ancestors 'none'; form-action 'self'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
}


def _static(name: str) -> FileResponse:
    return FileResponse(str(STATIC / name), headers={**SECURITY_HEADERS, **NO_STORE})


def _session(value: str) -> str:
    problem = session_id_problem(value)
    if problem is not None:
        raise HTTPException(400, f"bad session id: {problem}")
    return value


async def _body(request: Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError as error:
        raise HTTPException(400, "the body is not JSON") from error
    if not isinstance(body, dict):
        raise HTTPException(400, "the body must be a JSON object")
    return body


class Console:
    """The routes over one bus connection."""

    def __init__(self, settings: Settings, redis: aioredis.Redis | None = None) -> None:
        self.settings = settings
        self.tokens = Tokens(settings.console)
        self.redis = redis if redis is not None else redis_client.connect(settings.redis_url)
        self.topology = Topology(settings.names)
        self.bus = AgentbusClient(self.redis, self.topology, ride_out_s=settings.redis_ride_out_s)

    # -- pages -------------------------------------------------------------------------------------------

    async def index(self, request: Request) -> Response:
        if self.tokens.caller(request) is None:
            return RedirectResponse("/login", status_code=303)
        return _static("index.html")

    async def login_page(self, request: Request) -> Response:
        return _static("login.html")

    async def login(self, request: Request) -> Response:
        form = await request.form()
        presented = str(form.get("token", ""))
        role = role_of_token(presented, self.tokens.by_role)
        if role is None:
            return RedirectResponse("/login?failed=1", status_code=303)
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(
            COOKIE,
            login_cookie(presented, role),
            httponly=True,
            samesite="strict",
            secure=self.settings.console.secure_cookie,
            path="/",
        )
        return response

    async def logout(self, request: Request) -> Response:
        form = await request.form()
        self.tokens.require_action(request, str(form.get("csrf", "")), operator=False)
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(COOKIE, path="/")
        return response

    async def healthz(self, request: Request) -> Response:
        return PlainTextResponse("ok")

    async def readyz(self, request: Request) -> Response:
        try:
            await self.redis.ping()
        except Exception:
            return PlainTextResponse("redis unavailable", status_code=503)
        return PlainTextResponse("ready")

    # -- reads -------------------------------------------------------------------------------------------

    async def me(self, request: Request) -> Response:
        caller = self.tokens.require(request)
        return JSONResponse({"role": caller.role, "csrf": caller.csrf}, headers=NO_STORE)

    async def sessions(self, request: Request) -> Response:
        self.tokens.require(request)
        params = request.query_params
        state = next((name for name in SESSION_FILTERS if name == params.get("state", "all")), None)
        if state is None:
            raise HTTPException(400, "unknown state filter")
        search = params.get("q", "").strip()
        try:
            limit = int(params.get("limit", "50"))
        except ValueError as error:
            raise HTTPException(400, "limit must be a number") from error
        if search:
            page = await queries.find_session(self.redis, self.topology, _session(search))
        else:
            try:
                page = await queries.list_sessions(
                    self.redis, self.topology, state=state, cursor=params.get("cursor") or None, limit=limit
                )
            except BadCursor as error:
                raise HTTPException(400, str(error)) from error
        return JSONResponse(page, headers=NO_STORE)

    async def session(self, request: Request) -> Response:
        self.tokens.require(request)
        session_id = _session(request.path_params["session_id"])
        overview = await queries.session_overview(self.redis, self.topology, session_id)
        if overview is None:
            raise HTTPException(404, f"no session {session_id}")
        usage = await self.bus.usage(session_id)
        overview["usage"] = usage.model_dump(mode="json")
        request_json = await self.bus.latest_request(session_id)
        overview["next_request"] = request_json.request if request_json is not None else None
        overview["agents"] = await self._agents(session_id)
        return JSONResponse(overview, headers=NO_STORE)

    async def _agents(self, session_id: str) -> list[dict[str, Any]]:
        """The sub-agent sessions the session's Agent calls started, depth first, each with its state and cost."""
        tree = await self.bus.session_tree(session_id)
        agents = []
        for depth, node in walk(tree):
            if depth == 0:
                continue
            usage = await self.bus.usage(node.session_id)
            agents.append(
                {
                    "depth": depth,
                    "session_id": node.session_id,
                    "agent_id": node.agent_id,
                    "agent_type": node.agent_type,
                    "description": node.description,
                    "status": node.status,
                    "cost_usd": usage.total.cost_usd,
                }
            )
        return agents

    async def session_events(self, request: Request) -> Response:
        self.tokens.require(request)
        session_id = _session(request.path_params["session_id"])
        return _event_stream(session_rows(self.redis, self.topology, session_id))

    async def session_log(self, request: Request) -> Response:
        self.tokens.require(request)
        session_id = _session(request.path_params["session_id"])
        entries = await self.bus.history(session_id)
        return JSONResponse([json.loads(entry.to_wire_json()) for entry in entries], headers=NO_STORE)

    async def transcript(self, request: Request) -> Response:
        """The session's messages as JSONL, one Claude Code transcript line each (what its log holds)."""
        self.tokens.require(request)
        session_id = _session(request.path_params["session_id"])
        lines = [entry.message.to_wire_json() + "\n" for entry in await self.bus.history(session_id)]
        return Response(
            "".join(lines),
            media_type="application/x-ndjson",
            headers={"content-disposition": f'attachment; filename="{session_id}.jsonl"', **NO_STORE},
        )

    async def approvals(self, request: Request) -> Response:
        self.tokens.require(request)
        pending = await self.bus.pending_approvals()
        return JSONResponse([json.loads(item.request.to_wire_json()) for item in pending], headers=NO_STORE)

    async def approval_events(self, request: Request) -> Response:
        self.tokens.require(request)
        return _event_stream(approval_changes(self.redis, self.topology))

    async def dead_letters(self, request: Request) -> Response:
        self.tokens.require(request)
        return JSONResponse(await queries.dead_letters(self.redis, self.topology), headers=NO_STORE)

    async def bus_page(self, request: Request) -> Response:
        self.tokens.require(request)
        return JSONResponse(await queries.bus_overview(self.redis, self.topology), headers=NO_STORE)

    # -- actions -----------------------------------------------------------------------------------------

    async def send(self, request: Request) -> Response:
        self.tokens.require_action(request)
        session_id = _session(request.path_params["session_id"])
        text = (await _body(request)).get("text")
        if not isinstance(text, str) or not text.strip():
            raise HTTPException(400, "text must be a non-empty string")
        entry_id = await self.bus.send_prompt(session_id, text)
        return JSONResponse({"sent": entry_id})

    async def interrupt(self, request: Request) -> Response:
        self.tokens.require_action(request)
        session_id = _session(request.path_params["session_id"])
        return JSONResponse({"sent": await self.bus.interrupt(session_id)})

    async def answer(self, request: Request) -> Response:
        """allow (with an edited input), always (allow and add the suggested rules), deny (with a message): the
        calls ``agentbus approvals allow|deny`` make (sdk/approvals.py)."""
        self.tokens.require_action(request)
        approval_id = request.path_params["approval_id"]
        body = await _body(request)
        stored = await find_approval(self.bus, approval_id)
        if stored is None:
            raise HTTPException(404, f"no approval {approval_id}")
        if stored.decision is not None:
            raise HTTPException(409, f"approval {approval_id} was already answered ({stored.decision.outcome})")
        pending = PendingApproval(stored.request, self.bus)
        message = body.get("message") or None
        if message is not None and not isinstance(message, str):
            raise HTTPException(400, "message must be a string")
        updated_input = body.get("input")
        if updated_input is not None and not isinstance(updated_input, dict):
            raise HTTPException(400, "input must be a JSON object")
        decision = body.get("decision")
        if decision == "allow":
            await pending.allow(updated_input, message=message, answered_by="console")
        elif decision == "always":
            await pending.always_allow(updated_input, answered_by="console")
        elif decision == "deny":
            await pending.deny(message, interrupt=bool(body.get("interrupt")), answered_by="console")
        else:
            raise HTTPException(400, "decision must be allow, always or deny")
        return JSONResponse({"answered": approval_id, "decision": decision})

    async def replay(self, request: Request) -> Response:
        self.tokens.require_action(request)
        body = await _body(request)
        stream, dlq_id = body.get("dlq_stream"), body.get("dlq_id")
        if not isinstance(stream, str) or not isinstance(dlq_id, str):
            raise HTTPException(400, "dlq_stream and dlq_id are required")
        if stream not in await queries.dead_letter_stream_names(self.redis, self.topology):
            raise HTTPException(404, f"no dead-letter stream {stream}")
        new_id = await replay_dead_letter(self.redis, stream, dlq_id)
        if new_id is None:
            raise HTTPException(404, f"no dead letter {dlq_id} in {stream}")
        return JSONResponse({"replayed": new_id})

    def routes(self) -> list[Route | Mount]:
        return [
            Route("/", self.index),
            Route("/login", self.login_page, methods=["GET"]),
            Route("/login", self.login, methods=["POST"]),
            Route("/logout", self.logout, methods=["POST"]),
            Route("/healthz", self.healthz),
            Route("/readyz", self.readyz),
            Route("/api/me", self.me),
            Route("/api/sessions", self.sessions),
            Route("/api/sessions/{session_id}", self.session),
            Route("/api/sessions/{session_id}/events", self.session_events),
            Route("/api/sessions/{session_id}/log", self.session_log),
            Route("/api/sessions/{session_id}/transcript", self.transcript),
            Route("/api/sessions/{session_id}/prompt", self.send, methods=["POST"]),
            Route("/api/sessions/{session_id}/interrupt", self.interrupt, methods=["POST"]),
            Route("/api/approvals", self.approvals),
            Route("/api/approvals/events", self.approval_events),
            Route("/api/approvals/{approval_id}", self.answer, methods=["POST"]),
            Route("/api/dead-letters", self.dead_letters),
            Route("/api/dead-letters/replay", self.replay, methods=["POST"]),
            Route("/api/bus", self.bus_page),
            Mount("/static", StaticFiles(directory=str(STATIC)), name="static"),
        ]


def _event_stream(rows: AsyncIterator[str]) -> StreamingResponse:
    return StreamingResponse(rows, media_type="text/event-stream", headers={**NO_STORE, "x-accel-buffering": "no"})


class SecurityHeaders:
    """Adds :data:`SECURITY_HEADERS` to every response (a plain ASGI wrapper: event streams pass untouched)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                extra = [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items() if k.encode() not in present]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def build_console(settings: Settings, redis: aioredis.Redis | None = None) -> Starlette:
    """The console's ASGI app on ``settings``' bus."""
    from starlette.middleware import Middleware

    console = Console(settings, redis)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await console.redis.aclose()

    return Starlette(
        routes=console.routes(),
        middleware=[Middleware(SecurityHeaders)],
        lifespan=lifespan,
    )
