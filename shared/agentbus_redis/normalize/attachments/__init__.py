"""Attachments in the API view: which render, in what order, and the reminders they carry."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentbus_redis.lazy_facade import lazy_facade

if TYPE_CHECKING:
    from agentbus_redis.normalize.attachments.order import MessageT, reorder_attachments_for_api
    from agentbus_redis.normalize.attachments.reminders import REMINDER_BUILDERS, field, js_string
    from agentbus_redis.normalize.attachments.render import (
        PRODUCE_NOTHING,
        SYSTEM_REMINDER_OPEN,
        normalize_attachment_for_api,
        wrap_command_text,
        wrap_in_system_reminder,
        wrap_message_in_system_reminder,
    )

__all__ = [
    "PRODUCE_NOTHING",
    "REMINDER_BUILDERS",
    "SYSTEM_REMINDER_OPEN",
    "MessageT",
    "field",
    "js_string",
    "normalize_attachment_for_api",
    "reorder_attachments_for_api",
    "wrap_command_text",
    "wrap_in_system_reminder",
    "wrap_message_in_system_reminder",
]

_MODULE_OF = {
    "MessageT": "order",
    "PRODUCE_NOTHING": "render",
    "REMINDER_BUILDERS": "reminders",
    "SYSTEM_REMINDER_OPEN": "render",
    "field": "reminders",
    "js_string": "reminders",
    "normalize_attachment_for_api": "render",
    "reorder_attachments_for_api": "order",
    "wrap_command_text": "render",
    "wrap_in_system_reminder": "render",
    "wrap_message_in_system_reminder": "render",
}


__getattr__, __dir__ = lazy_facade(globals(), _MODULE_OF)
