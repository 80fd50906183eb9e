"""permissions/bash/effects.py: which Bash commands a re-run tool job may run again (they only read and print)."""

from __future__ import annotations

import pytest

from agentbus_redis.permissions.bash.effects import runs_without_side_effects


@pytest.mark.parametrize(
    "command",
    ["echo hi", "sleep 0.2", "ls | wc -l", "cat a.txt && head -1 b.txt", "timeout 5 ls", "LANG=C grep x a.txt"],
)
def test_commands_that_only_read_and_print_may_run_again(command: str) -> None:
    assert runs_without_side_effects(command)


@pytest.mark.parametrize(
    "command",
    [
        "echo a >> a.log",  # output redirected to a file
        "sleep 2; echo a >> a.log",
        "echo hi > /dev/null",  # any redirection: conservative
        "printf x >> b.txt",
        "rm -rf build",  # a program outside the list
        "ls && touch x",
        "echo $(rm x)",  # opaque: a substitution
        "(ls)",  # opaque: a subshell
        'bash -c "ls"',  # a script
        "xargs rm",  # arguments at run time
        "find . -delete",
        "$CMD",  # the program is only known at run time
        "",
    ],
)
def test_commands_with_possible_side_effects_run_at_most_once(command: str) -> None:
    assert not runs_without_side_effects(command)
