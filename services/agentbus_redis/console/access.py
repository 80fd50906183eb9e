"""Who is calling: the token (``Authorization: Bearer``) or the login cookie names a role (views/access.py);
an action needs the operator role and, when the browser's cookie authenticated it, the login's CSRF token
(a header, or a form field) — a cross-site page can make the browser send the cookie, never read the token."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.exceptions import HTTPException
from starlette.requests import Request

from agentbus_redis.config.settings import ConsoleSettings
from agentbus_redis.views.access import ROLE_ACTIONS, Role, csrf_ok, csrf_token, role_of_cookie, role_of_token

COOKIE = "agentbus_console"
CSRF_HEADER = "x-csrf-token"


@dataclass(frozen=True, slots=True)
class Caller:
    role: Role
    cookie: str | None
    """The login cookie that authenticated the request (None: a bearer token did)."""
    token: str

    @property
    def csrf(self) -> str | None:
        return csrf_token(self.cookie, self.token) if self.cookie is not None else None


class Tokens:
    """The configured tokens by role (empty: the console refuses everyone)."""

    def __init__(self, settings: ConsoleSettings) -> None:
        self.by_role: dict[Role, str] = {}
        if settings.token is not None and settings.token.get_secret_value():
            self.by_role["operator"] = settings.token.get_secret_value()
        if settings.read_only_token is not None and settings.read_only_token.get_secret_value():
            self.by_role["read_only"] = settings.read_only_token.get_secret_value()

    def caller(self, request: Request) -> Caller | None:
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer "):
            presented = header[7:].strip()
            role = role_of_token(presented, self.by_role)
            return Caller(role, None, presented) if role is not None else None
        cookie = request.cookies.get(COOKIE)
        if cookie:
            found = role_of_cookie(cookie, self.by_role)
            if found is not None:
                return Caller(found[0], cookie, found[1])
        return None

    def require(self, request: Request) -> Caller:
        caller = self.caller(request)
        if caller is None:
            raise HTTPException(401, "log in with the console token")
        return caller

    def require_action(self, request: Request, presented_csrf: str | None = None, *, operator: bool = True) -> Caller:
        """The caller of an action: an operator (unless not ``operator``: logging out), with the CSRF token of the
        login when a cookie authenticated it."""
        caller = self.require(request)
        if operator and not ROLE_ACTIONS[caller.role]:
            raise HTTPException(403, "this token is read-only")
        if caller.cookie is not None:
            presented = request.headers.get(CSRF_HEADER) or presented_csrf
            if not csrf_ok(presented, caller.cookie, caller.token):
                raise HTTPException(403, "missing or wrong CSRF token")
        return caller
