"""Which hosts a sandboxed command may reach through the worker's proxy, by domain, as Claude Code's sandbox
decides (``allowedDomains``, ``deniedDomains``).

A command has no network of its own (bubblewrap's empty network namespace); its only way out is the
worker's proxy, which asks :meth:`NetworkPolicy.check_target` about the name a request names, then
:meth:`NetworkPolicy.check_address` about every address the proxy itself resolved that name to (a name
that resolves to a private address — DNS rebinding — is refused like the address itself).

- **Names** are compared normalised: lower case, no trailing dot, internationalised names as their
  A-label (``bücher.de`` → ``xn--bcher-kva.de``, IDNA 2008 with UTS 46 mapping). A host whose last label
  is numeric (``127.1``, ``0x7f.1``, ``2130706433``: what ``inet_aton`` reads as an address) is refused.
- **Patterns**: ``example.com`` is that host only; ``*.example.com`` is any name below it
  (``a.example.com``, ``a.b.example.com``) but not ``example.com`` itself — list both for both. A bare
  ``*`` (everything) is refused: turn the sandbox off for that. Denied patterns win over allowed ones.
- **IP literals** are reached only when listed as they are (``10.0.0.5``, ``2001:db8::1``); a pattern
  never matches an address.
- **Ports**: the policy's ports only (80 and 443 unless configured).
- **Narrowing** (a session's own list, a sandboxed MCP server's): :meth:`NetworkPolicy.narrowed` keeps the
  deployment's ports, networks and denied patterns and replaces its allowed patterns by the narrower list,
  each entry of which the deployment must already allow — never a widening. An exact name (or IP literal)
  is accepted when the deployment allows that host; ``*.a.example.com`` when a deployment wildcard covers
  every name below it (``*.a.example.com`` itself or ``*.example.com``); a deployment's exact entry never
  covers a wildcard. An entry the deployment denies (an exact name it denies, a wildcard inside a denied
  wildcard) allows nothing and is refused too. The narrower list may add denied patterns of its own.
- **Addresses**: loopback and the unspecified address (which Linux connects to loopback) never, whatever
  is listed — the worker's Redis and its own ports live there. Any other address that is not global
  (private, link-local, the cloud metadata address 169.254.169.254, shared, reserved) or multicast only
  inside a network the deployment names (``allowed_networks``), or when it is an IP literal listed itself.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Literal

import idna

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

DEFAULT_PORTS: tuple[int, ...] = (80, 443)
BRIDGE_PORT = 3128
"""The port of the bridge inside a sandbox's network namespace (its own loopback: no other process sees it)."""
NO_PROXY = "localhost,127.0.0.1,::1"
"""A command's own loopback (a test server it starts) is reached directly, not through the proxy."""
MAX_HOST_CHARS = 253
LABEL = re.compile(r"^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$")
NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")

Refusal = Literal[
    "invalid_host", "not_allowed", "denied", "ip_literal", "port", "loopback", "non_global_address", "no_address"
]
"""Why the proxy refused a request (a bounded metric label)."""


class InvalidDomainPattern(ValueError):
    """A configured domain pattern that is not a host name, ``*.`` + a host name, or an IP literal."""

    def __init__(self, pattern: str, why: str) -> None:
        super().__init__(f"network allow-list entry {pattern!r}: {why}")
        self.pattern = pattern
        self.why = why


class DomainNotAllowed(InvalidDomainPattern):
    """An entry of a narrower list (a session's, a sandboxed MCP server's) that the deployment's policy does
    not allow: a narrower list may only narrow (:meth:`NetworkPolicy.narrowed`)."""


def normalize_host(host: str) -> str | None:
    """``host`` as compared: an IP literal in its compressed form (IPv6 without brackets), or a lower-case
    ASCII name without trailing dot; None when it is neither (bad syntax, a numeric last label, too long)."""
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    address = _ip_literal(text)
    if address is not None:
        return str(address)
    if text.endswith("."):
        text = text[:-1]
    if not text or "%" in text:
        return None
    if not text.isascii():
        try:
            text = idna.encode(text, uts46=True).decode("ascii")
        except idna.IDNAError:
            return None
    text = text.lower()
    labels = text.split(".")
    if len(text) > MAX_HOST_CHARS or not all(LABEL.match(label) for label in labels):
        return None
    if NUMERIC_LABEL.match(labels[-1]):  # inet_aton would read it as an address
        return None
    return text


def _ip_literal(text: str) -> IPAddress | None:
    if "%" in text:  # a scope id names an interface of the worker's host
        return None
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class DomainPattern:
    """One allow- or deny-list entry, normalised."""

    host: str
    wildcard: bool = False
    """``*.host``: any name below ``host``, not ``host`` itself."""

    @classmethod
    def parse(cls, pattern: str) -> DomainPattern:
        text = pattern.strip()
        wildcard = text.startswith("*.")
        body = text[2:] if wildcard else text
        if "*" in body:
            raise InvalidDomainPattern(pattern, "a wildcard is only allowed as the first label ('*.example.com')")
        host = normalize_host(body)
        if host is None:
            raise InvalidDomainPattern(pattern, "not a host name or an IP literal")
        if wildcard and _ip_literal(host) is not None:
            raise InvalidDomainPattern(pattern, "a wildcard cannot precede an IP address")
        return cls(host, wildcard)

    def matches(self, host: str) -> bool:
        """``host`` normalised (see :func:`normalize_host`)."""
        return host.endswith("." + self.host) if self.wildcard else host == self.host

    def covers(self, other: DomainPattern) -> bool:
        """Every host ``other`` matches, this pattern matches too (an exact entry covers only itself)."""
        if not other.wildcard:
            return self.matches(other.host)
        return self.wildcard and (other.host == self.host or other.host.endswith("." + self.host))

    def __str__(self) -> str:
        return f"*.{self.host}" if self.wildcard else self.host


@dataclass(frozen=True, slots=True)
class TargetDecision:
    """The proxy's answer about a requested host and port, before resolving it."""

    host: str
    """Normalised (the raw text when it did not normalise)."""
    port: int
    refusal: Refusal | None = None
    literal: IPAddress | None = None
    """Set when ``host`` is an IP literal (listed: it is the one address connected to)."""

    @property
    def allowed(self) -> bool:
        return self.refusal is None


@dataclass(frozen=True, slots=True)
class NetworkPolicy:
    """What a sandboxed command may reach (empty ``allowed``: nothing — no proxy, no bridge)."""

    allowed: tuple[DomainPattern, ...] = ()
    denied: tuple[DomainPattern, ...] = ()
    ports: frozenset[int] = field(default_factory=lambda: frozenset(DEFAULT_PORTS))
    networks: tuple[IPNetwork, ...] = ()
    """Non-global networks a resolved name may lead into (never loopback)."""

    @classmethod
    def build(
        cls,
        allowed: Iterable[str],
        denied: Iterable[str] = (),
        *,
        ports: Iterable[int] = DEFAULT_PORTS,
        networks: Iterable[IPNetwork] = (),
    ) -> NetworkPolicy:
        """Raises :class:`InvalidDomainPattern` for a bad entry (``*`` alone included)."""
        return cls(
            allowed=tuple(DomainPattern.parse(p) for p in allowed),
            denied=tuple(DomainPattern.parse(p) for p in denied),
            ports=frozenset(ports),
            networks=tuple(networks),
        )

    @property
    def enabled(self) -> bool:
        return bool(self.allowed)

    def narrowed(self, allowed: Iterable[str] | None, denied: Iterable[str] = ()) -> NetworkPolicy:
        """This policy limited to ``allowed`` (None: this policy's own allowed patterns; empty: no network)
        with ``denied`` refused besides this policy's denied patterns. Raises :class:`InvalidDomainPattern`
        for an entry that does not parse and :class:`DomainNotAllowed` for an allowed entry this policy does
        not allow (see the module docstring: a narrower list never widens)."""
        extra_denied = tuple(DomainPattern.parse(text) for text in denied)
        if allowed is None:
            kept = self.allowed
        else:
            parsed = [(text, DomainPattern.parse(text)) for text in allowed]
            for text, pattern in parsed:
                if not any(mine.covers(pattern) for mine in self.allowed):
                    wider = (
                        "the deployment allows no network" if not self.allowed else "the deployment does not allow it"
                    )
                    raise DomainNotAllowed(text, f"{wider} (a session or server list may only narrow)")
                if any(mine.covers(pattern) for mine in self.denied):
                    raise DomainNotAllowed(text, "the deployment denies it")
            kept = tuple(dict.fromkeys(pattern for _, pattern in parsed))
        return replace(self, allowed=kept, denied=tuple(dict.fromkeys((*self.denied, *extra_denied))))

    def check_target(self, host: str, port: int) -> TargetDecision:
        """May a command ask for ``host:port``? (The addresses it resolves to are checked after.)"""
        normalized = normalize_host(host)
        if normalized is None:
            return TargetDecision(host, port, "invalid_host")
        literal = _ip_literal(normalized)
        if any(pattern.matches(normalized) for pattern in self.denied):
            return TargetDecision(normalized, port, "denied", literal)
        if not any(pattern.matches(normalized) for pattern in self.allowed):
            return TargetDecision(normalized, port, "ip_literal" if literal is not None else "not_allowed", literal)
        if port not in self.ports:
            return TargetDecision(normalized, port, "port", literal)
        return TargetDecision(normalized, port, None, literal)

    def check_address(self, address: IPAddress, target: TargetDecision) -> Refusal | None:
        """May the proxy connect to ``address``, which ``target``'s host resolved to (or is)?"""
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if address.is_loopback or address.is_unspecified:
            return "loopback"
        if address.is_global and not address.is_multicast:
            return None
        if target.literal is not None and address == target.literal:
            return None  # an address listed as it is
        if any(address in network for network in self.networks if network.version == address.version):
            return None
        return "non_global_address"


def checked_domain_patterns(patterns: list[str]) -> list[str]:
    """``patterns`` unchanged when each parses as an allow- or deny-list entry; else ``InvalidDomainPattern`` (a
    ``ValueError``, so a pydantic validator reports it at its field) naming the bad entry."""
    for pattern in patterns:
        DomainPattern.parse(pattern)
    return patterns


def proxy_environment(port: int = BRIDGE_PORT) -> dict[str, str]:
    """The variables that send a command's HTTP(S) clients (curl, pip, git, urllib, requests…) to the
    bridge on its own loopback."""
    url = f"http://127.0.0.1:{port}"
    env = dict.fromkeys(("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"), url)
    return {**env, "NO_PROXY": NO_PROXY, "no_proxy": NO_PROXY}
