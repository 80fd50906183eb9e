"""The allow-listing proxy a tool worker runs for its sandboxed commands (the rules: ``confinement/network.py``).

It listens on a Unix socket that is mounted in each sandbox (the bridge there forwards the sandbox's
loopback port to it) and speaks the two forms HTTP clients use through ``HTTP(S)_PROXY``: ``CONNECT
host:port`` (https and anything tunnelled: the proxy never sees inside) and a plain-HTTP request with an
absolute URI, forwarded as one request (``Connection: close``). For each it checks the name against the
policy, resolves it itself and connects only to an address the policy accepts — the command never picks
the address, so a name resolving to loopback, a private or the metadata address is refused (DNS
rebinding included). A refusal is a ``403`` the command sees (``X-Proxy-Error: blocked-by-allowlist``,
as Claude Code's proxy answers). Every decision is logged (``sandbox_network``) and counted
(``agentbus_sandbox_network_requests_total``).

The main socket serves the deployment's policy. A narrower policy (a session's own allow-list, a sandboxed
MCP server's) gets a socket of its own for as long as the command or server that uses it lives
(:meth:`DomainProxy.listening`): the proxy knows which policy a connection is under by the socket it arrived
on, which the worker chose and mounted — nothing the command sends can name another (a sandbox sees only its
own socket, at the same path in every sandbox).

Why not a library: proxy.py (the best-known Python one) runs its own acceptor processes and threads with a
TCP listener and a plugin API around them; what is needed here is ~150 lines on the worker's own loop,
listening on a Unix socket, with the decision being a pure function.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import secrets
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import structlog

from agentbus_redis.confinement.network import IPAddress, NetworkPolicy, Refusal, TargetDecision
from agentbus_redis.observability.metrics import record_sandbox_network

log = structlog.get_logger(__name__)

MAX_HEAD_BYTES = 64 * 1024
HEAD_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 10.0
RELAY_BYTES = 65536
REFUSAL_LINGER_S = 10.0
MAX_CONNECTIONS = 512
"""Open through the proxy at once, every sandbox of the worker together: past it a request gets a 503 (the
worker's own descriptors stay available)."""
HOP_BY_HOP = {b"proxy-connection", b"proxy-authorization", b"connection", b"keep-alive"}


class DomainProxy:
    """Serves one Unix socket; see the module docstring."""

    def __init__(
        self,
        policy: NetworkPolicy,
        socket_path: Path,
        *,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.policy = policy
        self.socket_path = socket_path
        self.connect_timeout_s = connect_timeout_s
        self.max_connections = max_connections
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self.socket_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        self._server = await asyncio.start_unix_server(self._serve, path=str(self.socket_path), limit=MAX_HEAD_BYTES)
        # The sandbox's user (nobody, for a root worker) connects through the mount; on the worker's side the
        # directory (0700) keeps everyone else out.
        os.chmod(self.socket_path, 0o666)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()

    @contextlib.asynccontextmanager
    async def listening(self, policy: NetworkPolicy) -> AsyncIterator[Path]:
        """The socket serving ``policy`` while the context lasts: the main one for the deployment's own policy,
        else one of its own, beside it, removed at the end (connections through it run to their end)."""
        if policy == self.policy:
            yield self.socket_path
            return
        path = self.socket_path.with_name(f"policy-{secrets.token_hex(8)}.sock")

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._serve(reader, writer, policy)

        server = await asyncio.start_unix_server(serve, path=str(path), limit=MAX_HEAD_BYTES)
        os.chmod(path, 0o666)
        try:
            yield path
        finally:
            server.close()
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, policy: NetworkPolicy | None = None
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await self._handle(reader, writer, self.policy if policy is None else policy)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass
        finally:
            self._connections.discard(task)
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, policy: NetworkPolicy) -> None:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
        if len(self._connections) > self.max_connections:
            log.warning("sandbox_network", decision="denied", reason="too_many_connections")
            record_sandbox_network("too_many_connections")
            _refuse(writer, 503, "too_many_connections", "too many connections through the proxy; retry later")
            await _finish_refusal(reader, writer)
            return
        request = _parse_head(head)
        if request is None:
            _refuse(writer, 400, "bad_request", "a proxy request: CONNECT host:port, or a method and an http:// URI")
            log.info("sandbox_network", decision="denied", reason="bad_request")
            record_sandbox_network("bad_request")
            return
        method, host, port, forwarded = request
        target = policy.check_target(host, port)
        upstream = await self._open(policy, target) if target.allowed else None
        if isinstance(upstream, tuple):
            upstream_reader, upstream_writer, address = upstream
        else:
            reason: Refusal = target.refusal or upstream or "no_address"
            log.info("sandbox_network", decision="denied", reason=reason, host=target.host, port=port, method=method)
            record_sandbox_network(reason)
            _refuse(writer, 403, reason, f"{target.host}:{port} is not allowed ({reason})")
            await _finish_refusal(reader, writer)
            return
        log.info("sandbox_network", decision="allowed", host=target.host, port=port, address=address, method=method)
        record_sandbox_network("allowed")
        if forwarded is None:
            writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        else:
            upstream_writer.write(forwarded)
        try:
            await asyncio.gather(_relay(reader, upstream_writer), _relay(upstream_reader, writer))
        finally:
            upstream_writer.close()

    async def _open(
        self, policy: NetworkPolicy, target: TargetDecision
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, str] | Refusal | None:
        """A connection to the first address of ``target`` the policy accepts; the refusal when none is
        (None: the name did not resolve or nothing answered)."""
        loop = asyncio.get_running_loop()
        if target.literal is not None:
            addresses: list[IPAddress] = [target.literal]
        else:
            try:
                infos = await loop.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
            except OSError:
                return "no_address"
            addresses = list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos))
        refusals = {address: policy.check_address(address, target) for address in addresses}
        permitted = [address for address, refusal in refusals.items() if refusal is None]
        if not permitted:
            return next(iter(refusals.values()), "no_address")
        for address in permitted:
            with contextlib.suppress(OSError, TimeoutError):
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(str(address), target.port, limit=RELAY_BYTES), self.connect_timeout_s
                )
                return reader, writer, str(address)
        return "no_address"


def _parse_head(head: bytes) -> tuple[str, str, int, bytes | None] | None:
    """(method, host, port, the head to forward — None for CONNECT), or None for anything else."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
        return None
    method, target, version = (part.decode("latin-1") for part in parts)
    if method == "CONNECT":
        host, _, port_text = target.rpartition(":")
        if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            return None
        return method, host, int(port_text), None
    try:
        url = urlsplit(target)
        port = url.port or 80
    except ValueError:
        return None
    if url.scheme != "http" or not url.hostname:
        return None
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    headers = [line for line in lines[1:] if line and line.split(b":", 1)[0].strip().lower() not in HOP_BY_HOP]
    forwarded = b"\r\n".join([f"{method} {path} {version}".encode("latin-1"), *headers, b"Connection: close"])
    return method, url.hostname, port, forwarded + b"\r\n\r\n"


def _refuse(writer: asyncio.StreamWriter, status: int, reason: str, detail: str) -> None:
    body = f"agentbus sandbox proxy: {detail}\n".encode()
    phrase = {403: "Forbidden", 503: "Service Unavailable"}.get(status, "Bad Request")
    writer.write(
        f"HTTP/1.1 {status} {phrase}\r\nX-Proxy-Error: blocked-by-allowlist\r\nX-Proxy-Reason: {reason}\r\n"
        f"Content-Type: text/plain\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )


async def _finish_refusal(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Send the refusal, then read what the client still sends (a request body) until it closes: closing a
    socket with unread input resets it, and the client would see the reset instead of the answer."""
    await writer.drain()
    if writer.can_write_eof():
        writer.write_eof()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(REFUSAL_LINGER_S):
            while await reader.read(RELAY_BYTES):
                pass


async def _relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until end of stream, then half-close (the other direction may still be talking)."""
    with contextlib.suppress(OSError):
        while data := await reader.read(RELAY_BYTES):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
