"""The result types of a permission check (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agentbus_redis.permissions.rules import PermissionRule

Behavior = Literal["allow", "deny", "ask"]
DecisionReason = Literal["rule", "mode", "workspace", "read_only", "safety_check", "requires_approval", "ask_policy"]
"""Why: a matching ``rule``; the permission ``mode``; a read inside the ``workspace``; a
``read_only`` tool; a ``safety_check`` (sensitive path); nothing granted it (``requires_approval``);
the headless ``ask_policy`` resolved an ask."""


@dataclass(frozen=True, slots=True)
class PermissionDecision:
    """allow / deny / ask, why, the text the model gets when not allowed, and the rule(s) involved."""

    behavior: Behavior
    reason: DecisionReason
    message: str | None = None
    rule: PermissionRule | None = None
    rules: tuple[PermissionRule, ...] = ()
    """Every rule that matched (a compound Bash command is allowed by one rule per part)."""
    asked: PermissionDecision | None = None
    """For a decision the headless policy made: the "ask" it resolved."""

    def __post_init__(self) -> None:
        if self.rule is not None and not self.rules:
            object.__setattr__(self, "rules", (self.rule,))

    @property
    def allowed(self) -> bool:
        return self.behavior == "allow"

    def resolved(self, behavior: Behavior, reason: DecisionReason, message: str | None) -> PermissionDecision:
        """This "ask" turned into a final decision, keeping its rule(s) and itself as ``asked``."""
        return PermissionDecision(behavior, reason, message, self.rule, self.rules, asked=self)


@dataclass(frozen=True, slots=True)
class ToolCheck:
    """A tool-specific check's answer; ``passthrough`` means "no opinion, keep going"."""

    behavior: Literal["allow", "deny", "ask", "passthrough"]
    reason: DecisionReason = "requires_approval"
    message: str | None = None
    rule: PermissionRule | None = None
    rules: tuple[PermissionRule, ...] = ()

    def as_decision(self) -> PermissionDecision:
        behavior: Behavior = "ask" if self.behavior == "passthrough" else self.behavior
        return PermissionDecision(behavior, self.reason, self.message, self.rule, self.rules)
