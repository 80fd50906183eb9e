"""The README is one screen: under 300 lines, the setup and test commands first, its links resolve."""

from __future__ import annotations

import re

from tests.docs.examples import README, ROOT, blocks_of

SETUP = "python3 -m pip install uv && uv run --no-dev agentbus up"
TESTS = "uv run pytest"


def test_the_readme_stays_under_300_lines() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) < 300


def test_the_readme_starts_with_the_setup_and_the_test_command() -> None:
    first = blocks_of(README)[0]
    commands = [line.split("#", 1)[0].strip() for line in first.code.splitlines() if line.strip()]
    assert commands[:2] == [SETUP, TESTS]
    assert first.language == "bash"


def test_the_readmes_links_into_the_repository_resolve() -> None:
    text = README.read_text(encoding="utf-8")
    targets = [target for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text) if "://" not in target]
    assert targets
    missing = [target for target in targets if not (ROOT / target).exists()]
    assert missing == []
