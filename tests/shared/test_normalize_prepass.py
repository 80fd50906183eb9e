"""R5.3 attachment reordering and the pre-pass of normalizeMessagesForAPI (R4.1–R4.4)."""

from __future__ import annotations

from agentbus_redis.ids import SequentialIds
from agentbus_redis.messages.factories import (
    create_assistant_api_error_message,
    create_local_command_message,
    create_progress_message,
)
from agentbus_redis.messages.kinds import Message
from agentbus_redis.messages.system import ApiErrorSystemMessage, CompactBoundarySystemMessage
from agentbus_redis.normalize import reorder_attachments_for_api
from agentbus_redis.normalize.passes.prepass import (
    INTERACTIVE_MEDIA_ERRORS,
    NON_INTERACTIVE_MEDIA_ERRORS,
    build_media_strip_targets,
    drop_virtual_messages,
    filter_api_bound,
)
from tests.shared.normalize_builders import TIMESTAMP, assistant, attachment, image, text, tool_result, user


def _uuids(messages: list[Message]) -> list[str]:
    return [str(getattr(message, "uuid", "")) for message in messages]


def test_r5_3_example_attachments_bubble_above_prompt() -> None:
    """R5.3: ``[A_prev, U_prompt, Att1, Att2]`` → ``[A_prev, Att1, Att2, U_prompt]``."""
    a_prev, u_prompt = assistant(text("done")), user("next")
    att1, att2 = attachment({"type": "todo_reminder"}), attachment({"type": "date_change"})
    assert reorder_attachments_for_api([a_prev, u_prompt, att1, att2]) == [a_prev, att1, att2, u_prompt]


def test_r5_3_example_attachments_stop_after_tool_result() -> None:
    """R5.3: ``[U1, A1, U2(tr), U3(text), Att1]`` → ``[U1, A1, U2(tr), Att1, U3(text)]``."""
    u1, a1 = user("q"), assistant(text("calling"))
    u2, u3 = user([tool_result("t1")]), user([text("more")])
    att1 = attachment({"type": "todo_reminder"})
    assert reorder_attachments_for_api([u1, a1, u2, u3, att1]) == [u1, a1, u2, att1, u3]


def test_r5_3_example_attachment_left_at_top() -> None:
    """R5.3: ``[U1(text), Att1]`` → ``[Att1, U1(text)]``."""
    u1, att1 = user([text("hi")]), attachment({"type": "todo_reminder"})
    assert reorder_attachments_for_api([u1, att1]) == [att1, u1]


def test_r5_3_system_and_progress_are_passed_over_and_buffer_order_kept() -> None:
    """R5.3: system and progress messages are not stopping points; several buffered attachments keep
    their relative order; a user message whose tool_result is not first is no stopping point."""
    ids = SequentialIds(100)
    a1 = assistant(text("x"))
    progress = create_progress_message(tool_use_id="t", parent_tool_use_id="t", data={"type": "bash_progress"}, ids=ids)
    command = create_local_command_message("<local-command-stdout>ok</local-command-stdout>", ids=ids)
    text_first = user([text("note"), tool_result("t1")])
    att1, att2, att3 = (attachment({"type": "todo_reminder"}) for _ in range(3))
    messages: list[Message] = [a1, att1, progress, command, att2, text_first, att3]
    assert reorder_attachments_for_api(messages) == [a1, att1, att2, att3, progress, command, text_first]


def test_r4_2_virtual_messages_dropped() -> None:
    """R4.2: user/assistant messages with ``isVirtual`` never reach the API."""
    kept, virtual_user, virtual_assistant = user("a"), user("b", is_virtual=True), assistant(text("c"), is_virtual=True)
    assert drop_virtual_messages([kept, virtual_user, virtual_assistant]) == [kept]


def _error(text_value: str) -> Message:
    return create_assistant_api_error_message(text_value, ids=SequentialIds(500))


def test_r4_3_interactive_and_non_interactive_texts() -> None:
    """R4.3: the five media error texts per mode, with the exact wording of each mode."""
    assert "Image was too large. Double press esc to go back and try again with a smaller image." in (
        INTERACTIVE_MEDIA_ERRORS
    )
    assert "Image was too large. Try resizing the image or using a different approach." in NON_INTERACTIVE_MEDIA_ERRORS
    assert INTERACTIVE_MEDIA_ERRORS[
        "PDF too large (max 100 pages, 20MB). Double press esc to go back and try again, or use pdftotext to "
        "convert to text first."
    ] == frozenset({"document"})
    assert NON_INTERACTIVE_MEDIA_ERRORS["Request too large (max 20MB). Try with a smaller file."] == frozenset(
        {"document", "image"}
    )
    assert len(INTERACTIVE_MEDIA_ERRORS) == len(NON_INTERACTIVE_MEDIA_ERRORS) == 5


def test_r4_3_strip_target_is_nearest_meta_user_skipping_other_errors() -> None:
    """R4.3: walking back from the error, other synthetic errors are skipped and the first meta user
    message becomes the target; a second error on it accumulates block types."""
    meta = user([image(), text("look")], is_meta=True)
    image_error = _error("Image was too large. Double press esc to go back and try again with a smaller image.")
    pdf_error = _error("The PDF file was not valid. Double press esc to go back and try again with a different file.")
    targets = build_media_strip_targets([meta, image_error, pdf_error], interactive=True)
    assert targets == {meta.uuid: frozenset({"image", "document"})}


def test_r4_3_walk_stops_at_non_meta_user_or_assistant() -> None:
    """R4.3: a non-meta user or an ordinary assistant between the error and the meta message stops the walk."""
    meta = user([image()], is_meta=True)
    error = _error("Image was too large. Try resizing the image or using a different approach.")
    assert build_media_strip_targets([meta, user("typed"), error], interactive=False) == {}
    assert build_media_strip_targets([meta, assistant(text("ok")), error], interactive=False) == {}
    assert build_media_strip_targets([meta, error], interactive=False) == {meta.uuid: frozenset({"image"})}
    # The interactive text in a non-interactive session is not a media error.
    wrong_mode = _error("Image was too large. Double press esc to go back and try again with a smaller image.")
    assert build_media_strip_targets([meta, wrong_mode], interactive=False) == {}


def test_r4_4_filter_keeps_user_assistant_attachment_local_command() -> None:
    """R4.4: progress, non-local_command system messages and synthetic API errors are dropped."""
    ids = SequentialIds(900)
    keep_user, keep_assistant = user("q"), assistant(text("a"))
    keep_attachment = attachment({"type": "todo_reminder"})
    keep_command = create_local_command_message("<command-name>/cost</command-name>", ids=ids)
    progress = create_progress_message(tool_use_id="t", parent_tool_use_id="t", data={"type": "bash_progress"}, ids=ids)
    boundary = CompactBoundarySystemMessage(uuid="b", timestamp=TIMESTAMP, content="Conversation compacted")
    api_error = ApiErrorSystemMessage(uuid="e", timestamp=TIMESTAMP, level="error")
    synthetic = _error("API Error: Repeated 529 Overloaded errors")
    kept = filter_api_bound(
        [keep_user, progress, keep_assistant, boundary, keep_attachment, api_error, synthetic, keep_command]
    )
    assert _uuids(list(kept)) == _uuids([keep_user, keep_assistant, keep_attachment, keep_command])
