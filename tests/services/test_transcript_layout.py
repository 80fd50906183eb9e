"""R7.1 file layout and R7.2 permissions."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from agentbus_redis.session_ids import claude_session_id
from agentbus_redis.transcript_files.files import ensure_private_dir
from agentbus_redis.transcript_files.layout import (
    djb2_hash,
    sanitize_path,
    session_file,
    subagent_file,
    subagent_meta,
    subagent_meta_file,
    write_subagent_meta,
)


def test_r7_1_sanitize_path_replaces_every_non_alphanumeric() -> None:
    assert sanitize_path("/home/alice/my.project") == "-home-alice-my-project"
    assert sanitize_path("C:\\Users\\bob\\x_y z") == "C--Users-bob-x-y-z"
    assert sanitize_path("abcXYZ019") == "abcXYZ019"


def test_r7_1_non_bmp_character_becomes_two_dashes_like_javascript() -> None:
    # JavaScript's /[^a-zA-Z0-9]/g sees the two UTF-16 units of an emoji.
    assert sanitize_path("a😀b") == "a--b"
    assert sanitize_path("é") == "-"


def test_r7_1_long_path_is_cut_at_200_and_suffixed_with_base36_hash() -> None:
    name = "/home/alice/" + "deep/" * 50 + "projé😀ct"
    # Expected value computed with Node: Math.abs(djb2Hash(name)).toString(36) (sessionStoragePortable).
    expected = sanitize_path(name[:200])[:200] + "-8zi580"
    assert sanitize_path(name) == expected
    assert len(sanitize_path("x" * 200)) == 200


def test_djb2_hash_matches_javascript_string_hash() -> None:
    assert djb2_hash("hello") == 99162322  # Java/JS ((h << 5) - h + c) | 0
    assert djb2_hash("") == 0
    assert -(2**31) <= djb2_hash("x" * 10_000) < 2**31


def test_r7_1_session_and_subagent_paths(tmp_path: Path) -> None:
    """Files are named by the session's Claude Code UUID (issue 26: ``claude --resume`` takes only UUIDs);
    a bus id that is a UUID names its file itself."""
    s1 = claude_session_id("s1")
    assert s1 == "2b88e40d-f5ed-54be-bb75-1b206f05a20e"  # uuid5 under a namespace fixed forever
    assert session_file(tmp_path, "/home/alice/proj", "s1") == tmp_path / f"projects/-home-alice-proj/{s1}.jsonl"
    assert (
        subagent_file(tmp_path, "/home/alice/proj", "s1", "a42")
        == tmp_path / f"projects/-home-alice-proj/{s1}/subagents/agent-a42.jsonl"
    )
    assert (
        subagent_file(tmp_path, "/p", "s1", "a42", subdir="workflows")
        == tmp_path / f"projects/-p/{s1}/subagents/workflows/agent-a42.jsonl"
    )
    own = "964a72b1-b241-4bdf-8e80-a32dac797674"
    assert session_file(tmp_path, "/p", own) == tmp_path / f"projects/-p/{own}.jsonl"


@pytest.mark.parametrize("bad", ["", "..", "a/b", "a\\b"])
def test_ids_that_would_escape_the_directory_are_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError, match="invalid"):
        session_file(tmp_path, "/p", bad)


def test_r7_1_subagent_meta_sidecar_is_written_private(tmp_path: Path) -> None:
    transcript = subagent_file(tmp_path, "/p", "s1", "a1")
    meta = subagent_meta("Explore", description="look around")
    written = write_subagent_meta(transcript, meta)
    assert written == subagent_meta_file(transcript) == transcript.with_name("agent-a1.meta.json")
    assert json.loads(written.read_text()) == {"agentType": "Explore", "description": "look around"}
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    assert stat.S_IMODE(written.parent.stat().st_mode) == 0o700


def test_r7_2_missing_directories_are_created_0700(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "c"
    ensure_private_dir(target)
    for directory in (tmp_path / "a", tmp_path / "a/b", target):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
