"""Commands shared by the issue 15 Bash permission tests (pure table and end to end)."""

from __future__ import annotations

RUN_TIME_PROGRAM = "X=rm; $X x"
ISSUE_15_VARIANTS = [
    "echo $(rm x)",
    "echo `rm x`",
    "bash -c 'rm x'",
    "eval rm x",
    "\\rm x",
    "'rm' x",
    "r''m x",
    "/bin/rm x",
    "command rm x",
    "env rm x",
    "exec rm x",
    RUN_TIME_PROGRAM,
]
"""The twelve commands that removed the file under ``AGENTBUS_TOOLS__DENY=["Bash(rm:*)"]``."""
