"""M7: the exact texts of the synthetic assistant error a model call ends with when it gives up.

:func:`assistant_error_for` is Claude Code's ``getAssistantMessageFromError`` (M7.2) for our caller: an
API-key user in non-interactive (SDK / print) mode, so the subscriber-only 429 texts and the interactive
``/rewind`` hints never apply. The message text of an SDK error is built like the TypeScript SDK's
(``"<status> <compact JSON body>"``), not from Python's ``str(err)`` (M7.2 [REC]).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from agentbus_redis.messages.constants import API_ERROR_MESSAGE_PREFIX
from agentbus_redis.model.display_names import model_display_name
from agentbus_redis.model.retry import REPEATED_529_ERROR, ApiFailure, GiveUp

REQUEST_TIMED_OUT = "Request timed out"
PROMPT_TOO_LONG = "Prompt is too long"
REQUEST_TOO_LARGE = "Request too large (max 20MB). Try with a smaller file."
IMAGE_TOO_LARGE = "Image was too large. Try resizing the image or using a different approach."
PDF_TOO_LARGE = (
    "PDF too large (max 100 pages, 20MB). Try reading the file a different way (e.g., extract text with pdftotext)."
)
PDF_PASSWORD_PROTECTED = "PDF is password protected. Try using a CLI tool to extract or convert the PDF."
PDF_INVALID = "The PDF file was not valid. Try converting it to text first (e.g., pdftotext)."
MANY_IMAGE_DIMENSIONS = (
    "An image in the conversation exceeds the dimension limit for many-image requests (2000px). "
    "Start a new session with fewer images."
)
TOOL_USE_CONCURRENCY = f"{API_ERROR_MESSAGE_PREFIX}: 400 due to tool use concurrency issues."
DUPLICATE_TOOL_USE_ID = f"{API_ERROR_MESSAGE_PREFIX}: 400 duplicate tool_use ID in conversation history."
CREDIT_BALANCE_TOO_LOW = "Credit balance is too low"
INVALID_API_KEY = "Invalid API key · Fix external API key"
TOKEN_REVOKED = "Your account does not have access to Claude. Please login again or contact your administrator."
CONNECTION_ERROR = "Connection error."
"""The SDK's ``APIConnectionError`` message."""
OPUS_HIGH_LOAD = "Opus is experiencing high load, please use /model to switch to Sonnet"

_PDF_PAGES = re.compile(r"maximum of \d+ PDF pages")


def model_not_found(model: str) -> str:
    return (
        f"There's an issue with the selected model ({model}). It may not exist or you may not have access to it. "
        "Run --model to pick a different model."
    )


def switched_model_notice(fallback: str, original: str) -> str:
    """M6.3 step 5 (warning system message), naming both models (ids) by their display names."""
    return f"Switched to {model_display_name(fallback)} due to high demand for {model_display_name(original)}"


MODEL_FALLBACK_TRIGGERED = "Model fallback triggered"
"""M6.3 step 2 / R10.3: the tool_result of a call collected before the fallback switch."""


@dataclass(frozen=True, slots=True)
class ApiErrorText:
    """The synthetic assistant error (R2.3c): its one text block, ``error`` category and ``errorDetails``."""

    text: str
    error: str
    error_details: str | None = None


def sdk_error_message(failure: ApiFailure) -> str:
    """What the TypeScript SDK's ``APIError.message`` holds: ``"<status> <body.message or JSON body>"``
    (compact JSON like ``JSON.stringify``); the bare message for a transport failure."""
    body = failure.body
    if failure.status is None or body is None:
        return failure.message or CONNECTION_ERROR
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        detail = str(body["message"])
    else:
        detail = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    return f"{failure.status} {detail}"


def assistant_error_for(outcome: GiveUp, *, model: str) -> ApiErrorText:
    """M7.2, first match wins (non-interactive, API-key user); ``model`` is the model the call last used."""
    failure = outcome.failure
    if outcome.reason == "repeated_529":
        return ApiErrorText(f"{API_ERROR_MESSAGE_PREFIX}: {REPEATED_529_ERROR}", "unknown")  # M6.4
    message = failure.message
    status = failure.status
    if failure.timeout or (failure.connection and "timeout" in message.lower()):
        return ApiErrorText(REQUEST_TIMED_OUT, "unknown")
    raw = sdk_error_message(failure)
    if "prompt is too long" in message.lower():
        return ApiErrorText(PROMPT_TOO_LONG, "invalid_request", raw)  # M8.2
    if _PDF_PAGES.search(message):
        return ApiErrorText(PDF_TOO_LARGE, "invalid_request", raw)
    if "The PDF specified is password protected" in message:
        return ApiErrorText(PDF_PASSWORD_PROTECTED, "invalid_request", raw)
    if "The PDF specified was not valid" in message:
        return ApiErrorText(PDF_INVALID, "invalid_request", raw)
    if status == 400 and "image exceeds" in message and "maximum" in message:
        return ApiErrorText(IMAGE_TOO_LARGE, "invalid_request", raw)
    if status == 400 and "many-image" in message and "dimension" in message:
        return ApiErrorText(MANY_IMAGE_DIMENSIONS, "invalid_request", raw)
    if status == 413:
        return ApiErrorText(REQUEST_TOO_LARGE, "invalid_request", raw)
    if status == 400 and "`tool_use` ids were found without `tool_result` blocks immediately after" in message:
        return ApiErrorText(TOOL_USE_CONCURRENCY, "invalid_request", raw)
    if status == 400 and "`tool_use` ids must be unique" in message:
        return ApiErrorText(DUPLICATE_TOOL_USE_ID, "invalid_request", raw)
    if "Your credit balance is too low" in message:
        return ApiErrorText(CREDIT_BALANCE_TOO_LOW, "billing_error", raw)
    if "x-api-key" in message:
        return ApiErrorText(INVALID_API_KEY, "authentication_failed", raw)
    if status == 403 and "OAuth token has been revoked" in message:
        return ApiErrorText(TOKEN_REVOKED, "authentication_failed", raw)
    if status in (401, 403):
        return ApiErrorText(f"Failed to authenticate. {API_ERROR_MESSAGE_PREFIX}: {raw}", "authentication_failed", raw)
    if status == 404:
        return ApiErrorText(model_not_found(model), "invalid_request", raw)
    if failure.connection:
        return ApiErrorText(f"{API_ERROR_MESSAGE_PREFIX}: {message or CONNECTION_ERROR}", "unknown")
    return ApiErrorText(f"{API_ERROR_MESSAGE_PREFIX}: {raw}", "unknown")
