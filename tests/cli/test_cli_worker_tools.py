"""Issue 29: ``agentbus worker tools --tools …`` refuses a tool source that does not load with one line and exit
code 2, before the worker starts (no Redis is needed to find that out)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.process import agentbus, cli_env

KEY = "k" * 64


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--tools", "no_such_team_module:tools"],
            "agentbus: --tools no_such_team_module:tools: cannot import no_such_team_module: "
            "ModuleNotFoundError: No module named 'no_such_team_module'",
        ),
        (["--tools", "just_a_module"], "agentbus: --tools 'just_a_module': expected 'package.module:attribute'"),
        (
            ["--tools", "tests.integration.team_tools:nothing"],
            "agentbus: --tools tests.integration.team_tools:nothing: tests.integration.team_tools has no attribute "
            "'nothing'",
        ),
        (
            ["--tools", "tests.integration.team_tools:CityInput"],
            "agentbus: --tools tests.integration.team_tools:CityInput: ModelMetaclass is not a tool (a @tool "
            "function, a Tool, a list of them or a ToolRegistry)",
        ),
        (
            ["--pool", "Bad Pool"],
            "agentbus: --pool: pool name 'Bad Pool' must be 1-32 lowercase letters, digits, "
            "'_' or '-', starting with a letter or digit",
        ),
        (
            ["--no-builtins"],
            "agentbus: --no-builtins: this worker would run no tool (load some with --tools or --mcp-config)",
        ),
    ],
)
def test_a_tool_source_that_does_not_load_is_one_line_and_exit_code_2(
    args: list[str], line: str, tmp_path: Path
) -> None:
    env = cli_env("redis://127.0.0.1:1/0", AGENTBUS_INTERNAL_KEY=KEY, AGENTBUS_TOOLS__ENTRY_POINTS="false")
    outcome = agentbus("worker", "tools", *args, cwd=tmp_path, env=env)
    assert (outcome.code, outcome.error_line) == (2, line)


def test_tool_options_belong_to_the_tools_worker(tmp_path: Path) -> None:
    outcome = agentbus("worker", "model", "--pool", "team", cwd=tmp_path, env=cli_env("redis://127.0.0.1:1/0"))
    assert (outcome.code, outcome.error_line) == (
        2,
        "agentbus: --tools, --pool, --builtins and --mcp-config are options of `agentbus worker tools`",
    )
