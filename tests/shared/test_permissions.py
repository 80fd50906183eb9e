"""Claude Code's permission model for the headless bus (permissions/decide.py and friends).

Syntax reading under test (documented in permissions/rules.py): ``Tool``; ``Tool(content)``;
``Bash(prefix:*)`` / exact / wildcard; ``Read|Edit(path)`` with ``//abs``, ``~/home``, ``/`` and ``./``
anchored at the workspace root, bare names matching at any depth; ``WebFetch(domain:host)``;
``mcp__server`` / ``mcp__server__tool``.
"""

from __future__ import annotations

import pytest

from agentbus_redis.errors import AgentbusError, InvalidPermissionRule
from agentbus_redis.json_types import JsonObject
from agentbus_redis.messages.constants import (
    REJECT_MESSAGE,
    SUBAGENT_REJECT_MESSAGE,
    auto_reject_message,
    dont_ask_reject_message,
)
from agentbus_redis.permissions.bash.parse import parse_command_line
from agentbus_redis.permissions.decide import PermissionContext, check_permission, decide
from agentbus_redis.permissions.path_glob import gitignore_match, glob_match, normalize_posix
from agentbus_redis.permissions.rules import parse_rule, path_rule_matches

WS = "/ws"
HOME = "/home/u"


def ctx(**kwargs: object) -> PermissionContext:
    return PermissionContext.from_settings(workspace_root=WS, home_dir=HOME, **kwargs)  # type: ignore[arg-type]


def bash(command: str) -> JsonObject:
    return {"command": command}


# --- rule syntax --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tool", "content"),
    [
        ("Bash", "Bash", None),
        ("Bash()", "Bash", None),
        ("Bash(*)", "Bash", None),
        ("Bash(git status:*)", "Bash", "git status:*"),
        ("Bash(npm run test)", "Bash", "npm run test"),
        ("Bash(git * main)", "Bash", "git * main"),
        ('Bash(python -c "print\\(1\\)")', "Bash", 'python -c "print(1)"'),
        ("Read(./src/**)", "Read", "./src/**"),
        ("Edit(//abs/**)", "Edit", "//abs/**"),
        ("Read(~/x)", "Read", "~/x"),
        ("WebFetch(domain:example.com)", "WebFetch", "domain:example.com"),
        ("mcp__github", "mcp__github", None),
        ("mcp__github__*", "mcp__github__*", None),
        ("mcp__github__create_issue", "mcp__github__create_issue", None),
        ("Task", "Agent", None),
        ("  Glob  ", "Glob", None),
    ],
)
def test_rule_forms_parse(text: str, tool: str, content: str | None) -> None:
    rule = parse_rule(text, "allow")
    assert (rule.tool_name, rule.content, rule.behavior) == (tool, content, "allow")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty rule"),
        ("Bash(git status", "missing closing parenthesis"),
        ("Bash(ls) extra", "text after the closing parenthesis"),
        ("(ls)", "missing tool name"),
        ("Bash)", "closing parenthesis without an opening one"),
        ("Ba sh", "is not a tool name"),
        ("Bash(:*)", "empty command prefix"),
        ("Bash(git:*status:*)", "only allowed at the end"),
        ("WebFetch(example.com)", "domain:HOST"),
        ("mcp__server(x)", "no parenthesised content"),
        ("Write(src/**)", "written Edit(...)"),
        ("Grep(src/**)", "written Read(...)"),
        ("Agent( )", "empty agent type"),
        ("Edit2(x)", "content rules are understood for"),
        ("Read( )", "empty path pattern"),
    ],
)
def test_invalid_rules_raise_typed_error_with_rule_text(text: str, reason: str) -> None:
    with pytest.raises(InvalidPermissionRule) as caught:
        parse_rule(text, "deny", index=3)
    assert reason in caught.value.reason
    assert caught.value.rule == text
    assert (caught.value.behavior, caught.value.index) == ("deny", 3)
    assert isinstance(caught.value, AgentbusError)


def test_settings_list_error_names_its_index() -> None:
    with pytest.raises(InvalidPermissionRule) as caught:
        ctx(allow=["Bash(ls:*)", "Read(./a)", "Bash("])
    assert caught.value.index == 2
    assert caught.value.behavior == "allow"
    assert "allow[2]" in str(caught.value)


# --- Bash ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "command", "allowed"),
    [
        ("Bash(git status:*)", "git status", True),
        ("Bash(git status:*)", "git status --short", True),
        ("Bash(git status:*)", "git statusx", False),
        ("Bash(ls:*)", "lsof", False),
        ("Bash(npm run test)", "npm run test", True),
        ("Bash(npm run test)", "npm run test --watch", False),
        ("Bash(git * main)", "git push origin main", True),
        ("Bash(git * main)", "git push origin dev", False),
        ("Bash(git *)", "git", True),
        ("Bash(echo \\* *)", "echo * now", True),
        ("Bash(echo \\* *)", "echo x now", False),
        ("Bash", "anything at all | wc", True),
    ],
)
def test_bash_rule_forms(rule: str, command: str, allowed: bool) -> None:
    decision = check_permission("Bash", bash(command), ctx(allow=[rule]))
    assert (decision.behavior == "allow") is allowed


def test_bash_compound_every_subcommand_must_be_allowed() -> None:
    context = ctx(allow=["Bash(git status:*)", "Bash(npm run test)"])
    allowed = check_permission("Bash", bash("git status && npm run test"), context)
    assert allowed.behavior == "allow"
    assert [rule.text for rule in allowed.rules] == ["Bash(git status:*)", "Bash(npm run test)"]
    for separator in (" && ", " || ", "; ", " | ", " & ", "\n"):
        partial = check_permission("Bash", bash(f"git status{separator}curl evil.sh"), context)
        assert partial.behavior == "ask", separator
        assert partial.message == (
            "This Bash command contains multiple operations. The following part requires approval: curl evil.sh"
        )


def test_bash_quoted_separators_do_not_split() -> None:
    decision = check_permission("Bash", bash('echo "a && rm -rf /"'), ctx(allow=["Bash(echo:*)"]))
    assert decision.behavior == "allow"


def test_bash_deny_wins_if_any_part_is_denied() -> None:
    context = ctx(allow=["Bash"], deny=["Bash(rm:*)"])
    decision = check_permission("Bash", bash("git status; rm -rf build"), context)
    assert decision.behavior == "deny"
    assert decision.message == "Permission to use Bash with command git status; rm -rf build has been denied."
    assert decision.rule is not None
    assert decision.rule.text == "Bash(rm:*)"


@pytest.mark.parametrize(
    "command",
    [
        "FOO=1 rm x",
        'FOO="a b" BAR=$(id) rm x',
        "timeout 10 rm x",
        "nohup rm x",
        "find . | xargs rm",
        "(rm -rf x)",
        "{ rm x; }",
        "ls && rm x > /dev/null",
    ],
)
def test_bash_deny_rules_see_through_env_wrappers_xargs_and_groups(command: str) -> None:
    decision = check_permission("Bash", bash(command), ctx(deny=["Bash(rm:*)"], mode="bypassPermissions"))
    assert decision.behavior == "deny"


def test_bash_allow_strips_only_harmless_env_vars_and_wrappers() -> None:
    context = ctx(allow=["Bash(npm test:*)"])
    assert check_permission("Bash", bash("NODE_ENV=ci npm test"), context).behavior == "allow"
    assert check_permission("Bash", bash("timeout 30 npm test"), context).behavior == "allow"
    assert check_permission("Bash", bash("LD_PRELOAD=/x.so npm test"), context).behavior == "ask"
    assert check_permission("Bash", bash("PATH=/evil npm test"), context).behavior == "ask"
    assert check_permission("Bash", bash('NODE_ENV="$X" npm test'), context).behavior == "ask"


@pytest.mark.parametrize(
    "command", ["echo $(rm -rf /)", "echo `id`", 'echo "$(id)"', "cat <(ls)", "(ls)", "cat <<EOF\nx\nEOF"]
)
def test_bash_opaque_constructs_are_never_allowed_by_prefix_rules(command: str) -> None:
    decision = check_permission("Bash", bash(command), ctx(allow=["Bash(echo:*)", "Bash(cat:*)", "Bash(ls:*)"]))
    assert decision.behavior == "ask"


def test_bash_exact_rule_may_approve_a_whole_compound_line() -> None:
    context = ctx(allow=["Bash(make build && make test)"])
    assert check_permission("Bash", bash("make build && make test"), context).behavior == "allow"


def test_bash_output_redirection_must_stay_in_the_workspace() -> None:
    context = ctx(allow=["Bash(python:*)", "Bash(npm run test)"])
    assert check_permission("Bash", bash("python gen.py > out/data.txt 2>&1"), context).behavior == "allow"
    assert check_permission("Bash", bash("npm run test 2>&1"), context).behavior == "allow"
    assert check_permission("Bash", bash("python gen.py > /dev/null"), context).behavior == "allow"
    assert check_permission("Bash", bash("python gen.py > ~/.bashrc"), context).behavior == "ask"
    assert check_permission("Bash", bash("python gen.py >> ../outside.txt"), context).behavior == "ask"
    assert check_permission("Bash", bash("python gen.py > /etc/motd"), context).behavior == "ask"


def test_bash_ask_rule_asks_even_in_bypass_mode() -> None:
    context = ctx(ask=["Bash(git push:*)"], mode="bypassPermissions")
    decision = check_permission("Bash", bash("git push origin main"), context)
    assert decision.behavior == "ask"
    assert decision.reason == "rule"
    assert check_permission("Bash", bash("git status"), context).behavior == "allow"


def test_parse_command_line_reports_parts_and_redirect_targets() -> None:
    line = parse_command_line("a | b 2>&1 && c > 'my file' ; d")
    assert [part.text for part in line.commands] == ["a", "b 2>&1", "c > 'my file'", "d"]
    assert line.commands[2].output_targets == ("my file",)
    assert line.commands[1].output_targets == ()
    assert line.opaque == ()


# --- file paths ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("./src/**", "/ws/src/a/b.py", True),
        ("./src/**", "/ws/lib/src/b.py", False),
        ("/src/**", "/ws/src/b.py", True),
        ("/src/**", "/src/b.py", False),
        ("//etc/**", "/etc/passwd", True),
        ("//etc/**", "/ws/etc/passwd", False),
        ("~/.ssh/**", "/home/u/.ssh/id_rsa", True),
        ("~/.ssh/**", "/ws/.ssh/id_rsa", False),
        ("*.env", "/ws/deep/down/prod.env", True),
        (".env", "/ws/a/.env", True),
        ("secrets", "/ws/secrets/key.pem", True),
        ("src/*.py", "/ws/src/a.py", True),
        ("src/*.py", "/ws/x/src/a.py", False),
        ("src/*.py", "/ws/src/sub/a.py", False),
        ("**/*.{ts,tsx}", "/ws/ui/app.tsx", True),
        ("docs/", "/ws/docs/index.md", True),
    ],
)
def test_path_rule_gitignore_semantics(pattern: str, path: str, matches: bool) -> None:
    assert path_rule_matches(pattern, path, workspace_root=WS, home_dir=HOME) is matches


def test_glob_helpers() -> None:
    assert normalize_posix("/a/./b/../c//d") == "/a/c/d"
    assert normalize_posix("/../x") == "/x"
    assert glob_match("**/*.py", "a.py")
    assert glob_match("a/**/b", "a/b")
    assert glob_match("a/**/b", "a/x/y/b")
    assert not glob_match("*.py", "sub/a.py")
    assert glob_match("[!a]x", "bx")
    assert not glob_match("[!a]x", "ax")
    assert gitignore_match("node_modules", "a/node_modules/x/y.js")


def test_reads_inside_workspace_are_allowed_and_outside_ask() -> None:
    context = ctx()
    inside = check_permission("Read", {"file_path": "/ws/a.py"}, context)
    assert (inside.behavior, inside.reason) == ("allow", "workspace")
    assert check_permission("Read", {"file_path": "src/a.py"}, context).behavior == "allow"  # relative → workspace
    outside = check_permission("Read", {"file_path": "/etc/passwd"}, context)
    assert outside.behavior == "ask"
    assert outside.message == "Claude requested permissions to read from /etc/passwd, but you haven't granted it yet."
    assert check_permission("Read", {"file_path": "/ws/../etc/passwd"}, context).behavior == "ask"
    assert check_permission("Glob", {"pattern": "*"}, context).behavior == "allow"
    assert check_permission("Grep", {"pattern": "x", "path": "/tmp"}, context).behavior == "ask"


def test_read_deny_rule_and_symlink_target_paths() -> None:
    context = ctx(deny=["Read(./secrets/**)"], allow=["Read"])
    denied = check_permission("Read", {"file_path": "/ws/secrets/k"}, context)
    assert denied.behavior == "deny"
    assert denied.message == "Permission to read /ws/secrets/k has been denied."
    via_link = check_permission("Read", {"file_path": "/ws/link"}, context, extra_paths=["/ws/secrets/k"])
    assert via_link.behavior == "deny"


def test_edits_ask_by_default_and_accept_edits_allows_inside_workspace() -> None:
    assert check_permission("Edit", {"file_path": "/ws/a.py"}, ctx()).behavior == "ask"
    accept = ctx(mode="acceptEdits")
    for tool in ("Edit", "Write"):
        decision = check_permission(tool, {"file_path": "/ws/a.py"}, accept)
        assert (decision.behavior, decision.reason) == ("allow", "mode")
    outside = check_permission("Write", {"file_path": "/tmp/a.py"}, accept)
    assert outside.behavior == "ask"
    assert outside.message == "Claude requested permissions to write to /tmp/a.py, but you haven't granted it yet."


def test_edit_allow_rule_covers_write_and_implies_read() -> None:
    context = ctx(allow=["Edit(//data/**)"])
    assert check_permission("Write", {"file_path": "/data/x.json"}, context).behavior == "allow"
    assert check_permission("Read", {"file_path": "/data/x.json"}, context).behavior == "allow"
    assert check_permission("Write", {"file_path": "/data2/x.json"}, context).behavior == "ask"


def test_sensitive_paths_ask_even_with_allow_rules_and_bypass() -> None:
    for mode in ("acceptEdits", "bypassPermissions"):
        context = ctx(mode=mode, allow=["Edit(./**)"])
        for path in ("/ws/.git/config", "/ws/.claude/settings.json", "/ws/sub/.bashrc", "/ws/.VSCode/x"):
            decision = check_permission("Edit", {"file_path": path}, context)
            assert (decision.behavior, decision.reason) == ("ask", "safety_check"), (mode, path)
    relaxed = ctx(mode="bypassPermissions", protect_sensitive_paths=False)
    assert check_permission("Edit", {"file_path": "/ws/.git/config"}, relaxed).behavior == "allow"
    assert check_permission("Read", {"file_path": "/ws/.git/config"}, ctx()).behavior == "allow"


# --- other tools, rule precedence, modes --------------------------------------------------------


def test_web_fetch_domain_rules() -> None:
    context = ctx(allow=["WebFetch(domain:example.com)"], deny=["WebFetch(domain:evil.com)"])
    assert check_permission("WebFetch", {"url": "https://EXAMPLE.com/a?b"}, context).behavior == "allow"
    assert check_permission("WebFetch", {"url": "https://sub.example.com/"}, context).behavior == "ask"
    denied = check_permission("WebFetch", {"url": "http://user@evil.com:8080/x"}, context)
    assert denied.behavior == "deny"
    assert denied.message == "WebFetch denied access to domain:evil.com."


def test_mcp_server_and_tool_rules() -> None:
    context = ctx(allow=["mcp__github"], deny=["mcp__slack__post"])
    assert check_permission("mcp__github__create_issue", {}, context).behavior == "allow"
    assert check_permission("mcp__slack__post", {}, context).behavior == "deny"
    assert check_permission("mcp__slack__read", {}, context).behavior == "ask"
    assert check_permission("mcp__githubx__y", {}, context).behavior == "ask"
    assert check_permission("mcp__s__t", {}, ctx(allow=["mcp__s__*"])).behavior == "allow"


def test_deny_rules_win_over_allow_rules() -> None:
    context = ctx(allow=["Bash", "Read", "Edit(./**)"], deny=["Bash", "Read(./.env)", "Edit(./**)"], mode="acceptEdits")
    denied_bash = check_permission("Bash", bash("ls"), context)
    assert (denied_bash.behavior, denied_bash.message) == ("deny", "Permission to use Bash has been denied.")
    assert check_permission("Read", {"file_path": "/ws/.env"}, context).behavior == "deny"
    assert check_permission("Edit", {"file_path": "/ws/a.py"}, context).behavior == "deny"


def test_bypass_permissions_allows_everything_except_deny_and_ask_rules() -> None:
    context = ctx(mode="bypassPermissions", deny=["Write"])
    assert check_permission("Bash", bash("curl x | sh"), context).behavior == "allow"
    assert check_permission("Edit", {"file_path": "/tmp/x"}, context).behavior == "allow"
    assert check_permission("SomeTool", {}, context).behavior == "allow"
    assert check_permission("Write", {"file_path": "/ws/x"}, context).behavior == "deny"


def test_read_only_tools_are_allowed_by_default() -> None:
    assert check_permission("WebSearch", {"query": "x"}, ctx()).reason == "read_only"
    assert check_permission("CustomLookup", {}, ctx(), read_only=True).behavior == "allow"
    assert check_permission("CustomLookup", {}, ctx(), read_only=False).behavior == "ask"


def test_plan_mode_decides_like_default() -> None:
    calls: list[tuple[str, JsonObject]] = [
        ("Edit", {"file_path": "/ws/a"}),
        ("Bash", bash("ls")),
        ("Read", {"file_path": "/ws/a"}),
    ]
    for tool, tool_input in calls:
        assert (
            check_permission(tool, tool_input, ctx(mode="plan")).behavior
            == check_permission(tool, tool_input, ctx()).behavior
        )


def test_headless_ask_policy_main_agent_and_subagent() -> None:
    main = decide("Bash", bash("make"), ctx())
    assert (main.behavior, main.message, main.reason) == ("deny", REJECT_MESSAGE, "ask_policy")
    assert main.asked is not None
    assert main.asked.behavior == "ask"
    sub = decide("Bash", bash("make"), ctx(is_subagent=True))
    assert (sub.behavior, sub.message) == ("deny", SUBAGENT_REJECT_MESSAGE)


def test_ask_rule_resolution_keeps_the_rule() -> None:
    decision = decide("Bash", bash("git push"), ctx(ask=["Bash(git push:*)"]))
    assert decision.behavior == "deny"
    assert decision.rule is not None
    assert decision.rule.text == "Bash(git push:*)"


@pytest.mark.parametrize(
    ("policy", "behavior", "message"),
    [
        ("auto_reject", "deny", auto_reject_message("Bash")),
        ("ask_message", "deny", "Claude requested permissions to use Bash, but you haven't granted it yet."),
        ("allow", "allow", None),
        ("passthrough", "ask", "Claude requested permissions to use Bash, but you haven't granted it yet."),
    ],
)
def test_other_ask_policies(policy: str, behavior: str, message: str | None) -> None:
    decision = decide("Bash", bash("make"), ctx(ask_policy=policy))
    assert (decision.behavior, decision.message) == (behavior, message)


def test_dont_ask_mode_turns_every_ask_into_deny() -> None:
    for policy in ("reject", "allow", "passthrough"):
        decision = decide("Edit", {"file_path": "/ws/a"}, ctx(mode="dontAsk", ask_policy=policy))
        assert (decision.behavior, decision.reason) == ("deny", "mode")
        assert decision.message == dont_ask_reject_message("Edit")
    assert decide("Read", {"file_path": "/ws/a"}, ctx(mode="dontAsk")).behavior == "allow"
