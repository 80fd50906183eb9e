"""Human approval of tool calls (agent-loop.md §H): the records, texts and ingestion's approval rules."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentbus_redis.lazy_facade import lazy_facade

if TYPE_CHECKING:
    from agentbus_redis.approvals.ledger import (
        APPROVAL_MISMATCH,
        UNKNOWN_APPROVAL,
        AnswerOutcome,
        ApprovalBook,
        ApprovalRules,
        HasDeadline,
        Park,
        PendingApproval,
    )
    from agentbus_redis.approvals.records import (
        APPROVAL_OUTCOMES,
        APPROVAL_SCHEMA_VERSION,
        ApprovalAnswer,
        ApprovalContinuation,
        ApprovalDecision,
        ApprovalOutcome,
        ApprovalRequest,
        ApprovalRequested,
        AskedCall,
        SessionPermissions,
        apply_permission_updates,
        approval_id_for,
        approval_timeout_text,
        park_id_for,
        parse_approval_decision,
        parse_approval_request,
        permission_suggestions,
        rejection_text,
        rule_text,
        with_session_permissions,
    )

__all__ = [
    "APPROVAL_MISMATCH",
    "APPROVAL_OUTCOMES",
    "APPROVAL_SCHEMA_VERSION",
    "UNKNOWN_APPROVAL",
    "AnswerOutcome",
    "ApprovalAnswer",
    "ApprovalBook",
    "ApprovalContinuation",
    "ApprovalDecision",
    "ApprovalOutcome",
    "ApprovalRequest",
    "ApprovalRequested",
    "ApprovalRules",
    "AskedCall",
    "HasDeadline",
    "Park",
    "PendingApproval",
    "SessionPermissions",
    "apply_permission_updates",
    "approval_id_for",
    "approval_timeout_text",
    "park_id_for",
    "parse_approval_decision",
    "parse_approval_request",
    "permission_suggestions",
    "rejection_text",
    "rule_text",
    "with_session_permissions",
]

_MODULE_OF = {
    "APPROVAL_MISMATCH": "ledger",
    "APPROVAL_OUTCOMES": "records",
    "APPROVAL_SCHEMA_VERSION": "records",
    "AnswerOutcome": "ledger",
    "ApprovalAnswer": "records",
    "ApprovalBook": "ledger",
    "ApprovalContinuation": "records",
    "ApprovalDecision": "records",
    "ApprovalOutcome": "records",
    "ApprovalRequest": "records",
    "ApprovalRequested": "records",
    "ApprovalRules": "ledger",
    "AskedCall": "records",
    "HasDeadline": "ledger",
    "Park": "ledger",
    "PendingApproval": "ledger",
    "SessionPermissions": "records",
    "UNKNOWN_APPROVAL": "ledger",
    "apply_permission_updates": "records",
    "approval_id_for": "records",
    "approval_timeout_text": "records",
    "park_id_for": "records",
    "parse_approval_decision": "records",
    "parse_approval_request": "records",
    "permission_suggestions": "records",
    "rejection_text": "records",
    "rule_text": "records",
    "with_session_permissions": "records",
}


__getattr__, __dir__ = lazy_facade(globals(), _MODULE_OF)
