"""``parse_line``'s one-pass path (pydantic parses and validates the JSON in Rust) must give exactly what
the checked path (``json.loads`` + ``parse_message`` / the line adapter) gives, and reject what it rejects."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from agentbus_redis.errors import TranscriptLineError
from agentbus_redis.messages.content import CONTENT_BLOCKS_ADAPTER, UnknownBlock
from agentbus_redis.messages.kinds import STORED_TYPES, UserMessage, parse_message
from agentbus_redis.messages.system import OtherSystemMessage
from agentbus_redis.transcript import TRANSCRIPT_LINE_ADAPTER, parse_line, remove_chain_fields
from agentbus_redis.transcript.lines import OtherMessageLine, TranscriptLine, model_refusal
from tests.shared.transcript_builders import CLAUDE_CODE_CORPUS, corpus_files

VALID_USER = '{"type":"user","uuid":"u","timestamp":"t","message":{"role":"user","content":"hi"}'


def _checked(text: str) -> TranscriptLine:
    value = json.loads(text)
    if value["type"] in STORED_TYPES:
        try:
            return parse_message(value)  # type: ignore[return-value]
        except ValidationError:
            return OtherMessageLine.model_validate(value, by_alias=True, by_name=False)
    return TRANSCRIPT_LINE_ADAPTER.validate_python(value, by_alias=True, by_name=False)


def test_r7_14_one_pass_parse_equals_checked_parse_on_the_corpus(corpus_root: Path) -> None:
    """Same model class, same values, same set fields (so the same dump) for every good corpus line."""
    compared = 0
    for path in corpus_files(corpus_root):
        for number, text in enumerate(path.read_text(encoding="utf-8").split("\n"), start=1):
            try:
                fast = parse_line(text, number)
            except TranscriptLineError:
                continue
            slow = _checked(text)
            where = f"{path.relative_to(corpus_root / CLAUDE_CODE_CORPUS)}:{number}"
            assert type(fast) is type(slow), where
            assert fast == slow, where
            assert fast.model_fields_set == slow.model_fields_set, where
            compared += 1
    assert compared > 2500


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_r7_14_non_json_constants_are_bad_json_even_in_a_valid_line(constant: str) -> None:
    """JSON.parse rejects NaN/Infinity; pydantic's JSON parser would accept them."""
    with pytest.raises(TranscriptLineError) as caught:
        parse_line(VALID_USER + f',"extra":{constant}}}', 4)
    assert caught.value.kind == "bad_json"


def test_r7_14_the_word_nan_inside_a_string_is_fine() -> None:
    line = parse_line(VALID_USER + ',"note":"NaN and Infinity"}', 1)
    assert isinstance(line, UserMessage)


def test_r1_8_known_block_failing_an_optional_field_is_an_error_not_an_unknown_block() -> None:
    """Only a missing required string makes a known block an UnknownBlock; any other failure is an error."""
    assert isinstance(CONTENT_BLOCKS_ADAPTER.validate_python([{"type": "text"}])[0], UnknownBlock)
    with pytest.raises(ValidationError):
        CONTENT_BLOCKS_ADAPTER.validate_python([{"type": "text", "text": "x", "citations": "bad"}])


def test_r1_4_known_subtype_failing_its_model_is_an_other_shaped_line_not_other_system() -> None:
    """Issue 15: a line with a uuid never breaks the chain; its model's refusal stays reportable."""
    raw = '{"type":"system","subtype":"local_command","uuid":"u","timestamp":"t","level":5}'
    line = parse_line(raw, 3)
    assert isinstance(line, OtherMessageLine)
    assert model_refusal(line) == ["level"]
    assert line.to_wire() == json.loads(raw)
    other = parse_line(raw.replace("local_command", "brand_new").replace('"level":5', '"level":"info"'), 3)
    assert isinstance(other, OtherSystemMessage)
    with pytest.raises(TranscriptLineError) as caught:
        parse_line(raw.replace('"uuid":"u",', ""), 3)
    assert caught.value.kind == "invalid_message"
    assert caught.value.locations == ("uuid", "level")
    assert caught.value.detail == "2 error(s)"


def test_r7_19_removed_chain_fields_are_unset_not_null() -> None:
    line = parse_line(VALID_USER + ',"parentUuid":"p","isSidechain":false,"cwd":"/w"}', 1)
    assert isinstance(line, UserMessage)
    (stripped,) = remove_chain_fields([line])
    assert stripped.parent_uuid is None
    assert stripped.is_sidechain is None
    assert "parent_uuid" not in stripped.model_fields_set
    assert stripped.to_wire() == {k: v for k, v in line.to_wire().items() if k not in {"parentUuid", "isSidechain"}}
    assert line.parent_uuid == "p"  # the original is untouched
