"""A session's own network allow-list for its sandboxed commands: a narrowing of the deployment's, stored in
the session's config (``SessionModelConfig.sandbox_network``) and read by the tool worker at each job.

The rule (``NetworkPolicy.narrowed``): every allowed entry must be one the deployment allows (an exact name
it allows; a wildcard inside one of its wildcards), none one it denies; the session may add denied entries.
It fails closed: a list that does not parse or asks for more is refused with :class:`InvalidSessionNetwork`
naming the entry, and the session's commands do not run — never under the deployment's wider list instead.
"""

from __future__ import annotations

import json

from pydantic import ConfigDict, Field, ValidationError, field_validator

from agentbus_redis.confinement.network import NetworkPolicy, checked_domain_patterns
from agentbus_redis.wire import WireModel


class InvalidSessionNetwork(ValueError):
    """A session's ``sandbox_network`` that cannot be used (the message names the bad entry): its sandboxed
    commands do not run (never with the deployment's wider list instead)."""


class SessionSandboxNetwork(WireModel):
    """What one session's sandboxed commands may reach: a narrowing of the deployment's allow-list
    (``AGENTBUS_TOOLS__SANDBOX_NETWORK__*``), never a widening (``NetworkPolicy.narrowed``)."""

    model_config = ConfigDict(extra="forbid")

    allowed_domains: list[str] | None = None
    """Patterns as the deployment's (``example.com``, ``*.example.com``, an IP literal), each one the deployment
    allows; None: the deployment's list; ``[]``: no network for this session."""
    denied_domains: list[str] = Field(default_factory=list)
    """Refused for this session besides what the deployment denies."""

    @field_validator("allowed_domains", "denied_domains")
    @classmethod
    def _patterns_parse(cls, patterns: list[str] | None) -> list[str] | None:
        return None if patterns is None else checked_domain_patterns(patterns)

    def policy(self, deployment: NetworkPolicy) -> NetworkPolicy:
        """The session's effective policy; ``DomainNotAllowed`` names an entry the deployment does not allow."""
        return deployment.narrowed(self.allowed_domains, self.denied_domains)


def session_network_policy(deployment: NetworkPolicy, raw_config: str | bytes | None) -> NetworkPolicy:
    """The policy a session's sandboxed commands run under, from its stored config (``raw_config``, None when
    it has none): ``deployment`` narrowed by the config's ``sandbox_network``. Fails closed: raises
    :class:`InvalidSessionNetwork` (naming the bad entry) when the config's network part cannot be read or
    asks for more than the deployment allows — the caller refuses the command rather than widen it."""
    if raw_config is None:
        return deployment
    try:
        document = json.loads(raw_config)
    except ValueError:
        raise InvalidSessionNetwork("the session's config is not JSON: its sandbox network cannot be read") from None
    value = document.get("sandbox_network") if isinstance(document, dict) else None
    if value is None:
        return deployment
    try:
        network = SessionSandboxNetwork.model_validate(value)
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        where = ".".join(["sandbox_network", *(str(part) for part in first["loc"])])
        raise InvalidSessionNetwork(f"the session's {where}: {first['msg']}") from None
    try:
        return network.policy(deployment)
    except ValueError as error:  # DomainNotAllowed
        raise InvalidSessionNetwork(f"the session's sandbox_network.allowed_domains: {error}") from None
