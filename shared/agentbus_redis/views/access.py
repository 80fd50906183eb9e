"""Who may do what in the console: a token names a role, and a per-login CSRF token guards every action.

The console keeps no session store: the login cookie holds an HMAC of the token (never the token, so a
cookie read from a browser profile is not the credential itself) and the CSRF token is an HMAC of that
cookie, so both are checked by recomputing them. Comparisons are constant-time.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Literal

Role = Literal["operator", "read_only"]

ROLE_ACTIONS: dict[Role, bool] = {"operator": True, "read_only": False}
"""Whether a role may act (send, interrupt, answer approvals, replay dead letters); both may look."""


def _mac(key: str, what: str) -> str:
    return hmac.new(key.encode(), what.encode(), hashlib.sha256).hexdigest()


def login_cookie(token: str, role: Role) -> str:
    """The cookie value of a login with ``token``."""
    return f"{role}.{_mac(token, 'agentbus-console-login:' + role)}"


def csrf_token(cookie: str, token: str) -> str:
    """The CSRF token of a login (the page sends it back with every action)."""
    return _mac(token, "agentbus-console-csrf:" + cookie)


def role_of_token(presented: str, tokens: dict[Role, str]) -> Role | None:
    """The role a presented token grants (None: none)."""
    for role, token in tokens.items():
        if token and hmac.compare_digest(presented.encode(), token.encode()):
            return role
    return None


def role_of_cookie(cookie: str, tokens: dict[Role, str]) -> tuple[Role, str] | None:
    """The role a login cookie grants and the token it was made from (None: not a cookie of a current token)."""
    for role, token in tokens.items():
        if token and hmac.compare_digest(cookie.encode(), login_cookie(token, role).encode()):
            return role, token
    return None


def csrf_ok(presented: str | None, cookie: str, token: str) -> bool:
    return presented is not None and hmac.compare_digest(presented.encode(), csrf_token(cookie, token).encode())


__all__ = ["ROLE_ACTIONS", "Role", "csrf_ok", "csrf_token", "login_cookie", "role_of_cookie", "role_of_token"]
