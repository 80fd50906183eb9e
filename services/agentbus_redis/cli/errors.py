"""The CLI's error boundary: every expected failure becomes one line on stderr and an exit code.

``main()`` runs the typer app inside :func:`run_with_error_boundary`. An exception that escapes a
command is looked up, by the qualified names of its classes (most specific first), in
:data:`EXPLANATIONS`; a match prints ``agentbus: <message>`` and exits 1 (or the code it gives), anything
else prints a one-line "unexpected error" and exits 1. ``--debug`` / ``AGENTBUS_DEBUG=1`` re-raises
instead, so the traceback shows.

How a command (or the SDK under it) reports an expected failure, in order of preference:

- inside a command body with the message at hand: :func:`agentbus_redis.cli.common.fail`;
- anywhere below a command: raise :class:`CliError` (exit 1) or :class:`CliUsageError` (exit 2);
- a typed error of the library: subclass :class:`agentbus_redis.errors.AgentbusError` (printed as ``str(error)``),
  or add its qualified class name to :data:`EXPLANATIONS` with a function that words it.

Nothing here imports redis, pydantic or the services at module level: the lookup is by name, so the
boundary costs nothing on the happy path (``agentbus --help`` starts in a fraction of a second).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from typing import NoReturn
from urllib.parse import urlsplit, urlunsplit

FAILURE = 1
"""Exit code of a failed command (the input or the system it talks to is at fault)."""
USAGE_ERROR = 2
"""Exit code for bad arguments or unreadable input (click uses it for its own usage errors too)."""
DEBUG_ENV = "AGENTBUS_DEBUG"
"""Set to 1 (or pass ``--debug``) to get tracebacks instead of one-line errors."""


class CliError(Exception):
    """An expected failure: printed as ``agentbus: <message>``, the process exits with ``exit_code``."""

    exit_code = FAILURE

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class CliUsageError(CliError):
    """The arguments or the input file are unusable (exit 2)."""

    exit_code = USAGE_ERROR


def debug_enabled() -> bool:
    """True when tracebacks were asked for (``--debug`` sets the variable for this process)."""
    return os.environ.get("AGENTBUS_DEBUG", "").strip().lower() in {"1", "true", "yes", "on"}


def redacted_url(url: str) -> str:
    """``url`` with its password replaced by ``***`` (error messages end up in CI logs)."""
    parts = urlsplit(url)
    if not parts.password:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}{port}"))


def redis_url_in_use() -> str:
    """The Redis URL the commands connect to: the ``--redis-url`` option or ``REDIS_URL`` (the root
    callback exports the option), else what the settings resolve (``.env``, the default)."""
    for name in ("REDIS_URL", "AGENTBUS_REDIS_URL"):
        if os.environ.get(name):
            return redacted_url(os.environ[name])
    try:
        from agentbus_redis.config.settings import Settings

        return redacted_url(Settings().redis_url)
    except Exception:  # the settings themselves are broken: name the variable instead
        return "REDIS_URL"


_REDIS_CONNECT_ERROR = re.compile(r"^Error -?\d+ connecting to \S+?\. (?P<reason>.*?)\.?$")


def _connection_reason(error: BaseException) -> str:
    """``connection refused``, ``name or service not known``… from redis-py's wrapped OSError."""
    cause = error.__cause__ or error.__context__
    if isinstance(cause, OSError) and cause.errno and cause.errno > 0:
        return os.strerror(cause.errno).lower()
    match = _REDIS_CONNECT_ERROR.match(str(error))
    reason = match.group("reason") if match else str(error)
    return reason[:1].lower() + reason[1:] if reason else "no reason given"


def _unreachable_redis(error: BaseException) -> CliError:
    return CliError(
        f"cannot reach Redis at {redis_url_in_use()} ({_connection_reason(error)}); start one or set REDIS_URL"
    )


def _redis_authentication(error: BaseException) -> CliError:
    return CliError(f"Redis at {redis_url_in_use()} refused the credentials ({error}); check the user in REDIS_URL")


def _redis_timeout(error: BaseException) -> CliError:
    return CliError(f"Redis at {redis_url_in_use()} did not answer in time ({error})")


def _redis_refusal(error: BaseException) -> CliError:
    return CliError(f"Redis at {redis_url_in_use()} refused the command: {error}")


def _redis_unavailable(error: BaseException) -> CliError:
    """A publish or read that rode out an outage and gave up: the line its last Redis error has."""
    cause = error.__cause__
    known = explain(cause) if cause is not None else None
    if known is None:
        return _as_stated(error)
    bound_s = getattr(error, "bound_s", 0)
    return CliError(f"{known} (retried for {bound_s:g}s)" if bound_s else str(known), exit_code=known.exit_code)


def _not_a_dead_letter(error: BaseException) -> CliError:
    return CliError(f"{error}: not a dead letter (`agentbus dlq ls` lists them)")


def _invalid_value(error: BaseException) -> CliError:
    """A pydantic ValidationError (mostly the settings: a bad ``AGENTBUS_*`` variable): its first error."""
    errors = getattr(error, "errors", None)
    title = getattr(error, "title", "value")
    first = errors()[0] if callable(errors) and errors() else None
    if first is None:
        return CliError(f"invalid {title}: {error}")
    where = ".".join(str(part) for part in first.get("loc", ())) or "value"
    return CliError(f"invalid {title}: {where}: {first.get('msg')} (got {first.get('input')!r})")


def _as_stated(error: BaseException) -> CliError:
    return CliError(str(error) or type(error).__name__)


def _os_error(error: BaseException) -> CliError:
    if isinstance(error, OSError) and error.strerror:
        where = f"{error.filename}: " if error.filename is not None else ""
        return CliError(f"{where}{error.strerror[:1].lower()}{error.strerror[1:]}")
    return _as_stated(error)


def _itself(error: BaseException) -> CliError:
    return error if isinstance(error, CliError) else _as_stated(error)


EXPLANATIONS: dict[str, Callable[[BaseException], CliError]] = {
    "agentbus_redis.cli.errors.CliError": _itself,
    "agentbus_redis.errors.AgentbusError": _as_stated,
    "agentbus_redis.streams.deadletter.DeadLetterDecodeError": _not_a_dead_letter,
    "agentbus_redis.runtime.ride_out.RedisUnavailable": _redis_unavailable,
    "redis.exceptions.AuthenticationError": _redis_authentication,
    "redis.exceptions.AuthorizationError": _redis_authentication,
    "redis.exceptions.ConnectionError": _unreachable_redis,
    "redis.exceptions.TimeoutError": _redis_timeout,
    "redis.exceptions.ResponseError": _redis_refusal,
    "pydantic_core._pydantic_core.ValidationError": _invalid_value,
    "builtins.TimeoutError": _as_stated,
    "builtins.OSError": _os_error,
    "agentbus_redis.config.settings.MissingInternalKey": _as_stated,
    "agentbus_redis.console.server.NoConsoleToken": _as_stated,
}
"""Expected failures by qualified class name → the one-line error for it. An exception matches the first
class of its MRO found here, so a subclass entry wins over its base's (AuthenticationError over
ConnectionError). Add a row for a new typed error that does not subclass CliError or AgentbusError."""


def explain(error: BaseException) -> CliError | None:
    """The one-line error for ``error``, or None when it is not an expected failure (a bug)."""
    for cls in type(error).__mro__:
        explanation = EXPLANATIONS.get(f"{cls.__module__}.{cls.__qualname__}")
        if explanation is not None:
            return explanation(error)
    return None


def report(error: BaseException) -> NoReturn:
    """Print ``error`` as one line on stderr and exit with its code (the boundary's last step)."""
    known = explain(error)
    if known is None:
        message = f"unexpected error: {type(error).__name__}: {error} (rerun with --debug for the traceback)"
        code = FAILURE
    else:
        message, code = str(known), known.exit_code
    one_line = " ".join(message.split())
    sys.stderr.write(f"agentbus: {one_line}\n")
    sys.stderr.flush()
    raise SystemExit(code)


def run_with_error_boundary(run: Callable[[], object]) -> None:
    """Run the CLI; turn every exception that escapes it into one line and an exit code."""
    try:
        run()
    except Exception as error:
        if debug_enabled():
            raise
        report(error)
