"""Issue 15, "Bash deny rules are bypassed": deny/ask rules match every sub-command the shell runs,
read by a real parser (tree-sitter's bash grammar), after quotes, escapes, wrappers and program
paths; a program known only at run time asks whenever a deny/ask rule could be affected; allow
rules get no more permissive."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentbus_redis.permissions.bash.parse import parse_command_line
from agentbus_redis.permissions.bash.wrappers import Arg, resolve_invocations
from agentbus_redis.permissions.decide import PermissionContext, check_permission, decide
from agentbus_redis.permissions.rules import bash_rule_could_match
from tests.shared.bash_cases import ISSUE_15_VARIANTS

RUN_TIME_PROGRAMS = [
    "X=rm; $X x",
    "$(echo rm) x",
    '"${X}" x',
    "`echo rm` x",
    "/bin/r? x",
    "{rm,x}",
    'eval "$CMD"',
    'bash -c "$S"',
    "sh",
    "echo 'rm x' | bash",
    "bash script.sh",
    "source ./s.sh",
    ". ./s.sh",
    "env $OPTS x",
    "env -S 'rm x'",
    "xargs -I{} {} x",
    "find . -exec {} ;",
    "alias r=rm",
    "hash -p /bin/rm r",
    "if then",
]
"""Commands whose program is only known when they run."""

ALREADY_BLOCKED = [
    "ls && rm x",
    "ls; rm x",
    "ls | rm x",
    "ls || rm x",
    "ls & rm x",
    "ls\nrm x",
    "(rm x)",
    "{ rm x; }",
    "A=1 rm x",
    'FOO="a b" BAR=$(id) rm x',
    "timeout 10 rm x",
    "nohup rm x",
    "find . | xargs rm",
]
"""Forms the old splitter already denied (must not regress)."""

MORE_WRAPPERS = [
    "sudo -u root rm x",
    "time rm x",
    "stdbuf -oL rm x",
    "nice -n 5 rm x",
    "nice -5 rm x",
    "timeout -s KILL 5s rm x",
    "env -i A=1 -- rm x",
    "command -p rm x",
    "builtin eval 'rm x'",
    "exec -a name rm x",
    "xargs -0 -n 1 rm",
    "find . -name '*.o' -exec rm {} +",
    "setsid nohup nice rm x",
    "/usr/bin/env rm x",
    "busybox rm x",
    "chroot / rm x",
    "$'\\x72m' x",
    '"r"m x',
    "ls > out; rm x 2>/dev/null",
    "f() { rm x; }; f",
    "if true; then rm x; fi",
    "for f in a; do rm $f; done",
    "export A=$(rm x)",
    'cat <<< "$(rm x)"',
    "cat <(rm x)",
    "trap 'rm x' EXIT",
    "sh -ec 'ls; rm x'",
    "bash -c \"eval 'rm x'\"",
    "! rm x",
    "coproc rm x",
    "rm\\\n x",
]


def ctx(**kwargs: object) -> PermissionContext:
    return PermissionContext.from_settings(workspace_root="/ws", **kwargs)  # type: ignore[arg-type]


DENY_RM = {"deny": ["Bash(rm:*)"], "mode": "bypassPermissions"}


@pytest.mark.parametrize("command", ISSUE_15_VARIANTS + ALREADY_BLOCKED + MORE_WRAPPERS)
def test_issue_15_deny_rule_sees_every_program_the_line_runs(command: str) -> None:
    decision = check_permission("Bash", {"command": command}, ctx(**DENY_RM))
    if command in RUN_TIME_PROGRAMS:
        assert (decision.behavior, decision.reason) == ("ask", "safety_check")
        return
    assert decision.behavior == "deny", decision
    assert decision.message == f"Permission to use Bash with command {command.strip()} has been denied."
    assert decision.rule is not None
    assert decision.rule.text == "Bash(rm:*)"


@pytest.mark.parametrize("command", RUN_TIME_PROGRAMS)
def test_issue_15_run_time_program_asks_when_a_rule_could_be_affected(command: str) -> None:
    for settings in (DENY_RM, {"deny": ["Bash(rm:*)"], "allow": ["Bash"]}, {"ask": ["Bash(git push:*)"]}):
        decision = check_permission("Bash", {"command": command}, ctx(**settings))
        assert (decision.behavior, decision.reason) == ("ask", "safety_check"), (command, settings)
        assert decision.message is not None
        assert decision.message.startswith("This Bash command contains ")
        assert decision.message.endswith(", so its permission rules cannot be checked")
    headless = decide("Bash", {"command": command}, ctx(**DENY_RM))
    assert (headless.behavior, headless.reason) == ("deny", "ask_policy")


@pytest.mark.parametrize("command", RUN_TIME_PROGRAMS)
def test_run_time_program_without_deny_or_ask_rules_keeps_its_old_decision(command: str) -> None:
    assert check_permission("Bash", {"command": command}, ctx(allow=["Bash"])).behavior == "allow"
    assert check_permission("Bash", {"command": command}, ctx(mode="bypassPermissions")).behavior == "allow"
    assert check_permission("Bash", {"command": command}, ctx(allow=["Bash(echo:*)", "Bash(bash:*)"])).behavior == (
        "ask"
    )


@pytest.mark.parametrize(
    ("command", "affected"),
    [
        ("rm $F", True),  # $F may be -rf
        ("rm -- $F", False),  # -- pins the position the rule compares
        ("git $SUB origin", True),
        ("git log $REF", False),
        ("echo -rf x | xargs rm", True),
        ("ls $DIR", False),
    ],
)
def test_run_time_arguments_ask_only_where_a_rule_compares_them(command: str, affected: bool) -> None:
    context = ctx(deny=["Bash(rm -rf:*)", "Bash(git push:*)"], mode="bypassPermissions")
    decision = check_permission("Bash", {"command": command}, context)
    assert (decision.behavior == "ask") is affected, decision
    assert decision.behavior != "deny"


@pytest.mark.parametrize(
    ("content", "words", "could"),
    [
        ("rm -rf:*", ["rm", None], True),
        ("rm -rf:*", ["rm", "-f", None], False),
        ("rm -rf:*", [None], True),
        ("git * main", ["git", "push", None], True),
        ("git * main", ["gh", None], False),
        ("npm test", ["npm", "test", None], True),
        ("npm test", ["npm", "run"], False),
    ],
)
def test_bash_rule_could_match(content: str, words: list[str | None], could: bool) -> None:
    assert bash_rule_could_match(content, words) is could


@pytest.mark.parametrize(
    "command",
    [
        "git status; rm x",
        "git status $(rm x)",
        "git status `rm x`",
        "git status && rm x",
        "git status | rm x",
        "git status\nrm x",
        "(git status)",
        "git status > /etc/motd",
        "ls && git status > ../out",
        "git status <(rm x)",
        "git status; X=rm; $X x",
        "'git' status",
        "PATH=/tmp git status",
        "X=1; git status",
        "bash -c 'git status'",
        "eval git status",
        "git status & rm x",
    ],
)
def test_issue_15_allow_rules_get_no_more_permissive(command: str) -> None:
    decision = check_permission("Bash", {"command": command}, ctx(allow=["Bash(git status:*)"]))
    assert decision.behavior == "ask", command


@pytest.mark.parametrize(
    "command",
    ["git status", "git status --short 2>&1", "LANG=C git status", "timeout 5 git status", 'git status -- "a b"'],
)
def test_allow_rules_still_approve_what_they_name(command: str) -> None:
    assert check_permission("Bash", {"command": command}, ctx(allow=["Bash(git status:*)"])).behavior == "allow"


def test_quoted_operators_are_words_not_commands() -> None:
    context = ctx(deny=["Bash(rm:*)"], allow=["Bash(echo:*)"])
    assert check_permission("Bash", {"command": 'echo "a && rm -rf /"'}, context).behavior == "allow"
    assert check_permission("Bash", {"command": "echo 'rm x' # rm x"}, context).behavior == "allow"
    assert check_permission("Bash", {"command": "command -v rm"}, ctx(deny=["Bash(rm:*)"])).behavior != "deny"


def test_parser_reads_words_like_bash() -> None:
    line = parse_command_line("A=1 \\rm 'a b' r''m $'\\x41' \"q\\\"\" > out.txt y 2>&1")
    [command] = line.commands
    [invocation] = command.invocations
    assert [arg.value for arg in invocation.stages[0]] == ["rm", "a b", "rm", "A", 'q"', "y"]
    assert command.output_targets == ("out.txt",)
    assert command.words[0] == "A=1"
    assert line.opaque == ()


def test_redirection_the_grammar_hangs_on_a_list_belongs_to_its_last_command() -> None:
    line = parse_command_line("a | b 2>&1 && c > f")
    assert [(part.text, part.output_targets) for part in line.commands] == [
        ("a", ()),
        ("b 2>&1", ()),
        ("c > f", ("f",)),
    ]


def test_wrapper_stages_and_unknown_wrapper_options() -> None:
    def stages(*words: str) -> list[list[str]]:
        [invocation] = resolve_invocations(tuple(Arg(word, word) for word in words))
        return [[arg.text for arg in stage] for stage in invocation.stages]

    assert stages("timeout", "5", "nice", "rm", "x") == [
        ["timeout", "5", "nice", "rm", "x"],
        ["nice", "rm", "x"],
        ["rm", "x"],
    ]
    [unknown] = resolve_invocations((Arg("env", "env"), Arg("--frobnicate", "--frobnicate"), Arg("rm", "rm")))
    assert unknown.unknowable == "an option --frobnicate of env this check does not know"


WRAPPERS = st.sampled_from(["", "command ", "env ", "exec ", "nice -n 1 ", "timeout 5 ", "nohup ", "sudo ", "time "])
SPELLINGS = st.sampled_from(["rm", "\\rm", "'rm'", '"rm"', "r''m", "/bin/rm", "/usr/bin/rm", "$'rm'", "$'\\x72m'"])
CONTEXTS = st.sampled_from(["{}", "ls && {}", "ls; {}", "echo $({})", "echo `{}`", "({})", "{{ {}; }}", "ls | {}"])


@given(WRAPPERS, WRAPPERS, SPELLINGS, CONTEXTS)
def test_issue_15_property_no_spelling_of_rm_gets_past_a_deny_rule(
    outer: str, inner: str, spelling: str, context: str
) -> None:
    command = context.format(f"{outer}{inner}{spelling} -f x")
    decision = decide("Bash", {"command": command}, ctx(deny=["Bash(rm:*)"], allow=["Bash"], ask_policy="allow"))
    assert decision.behavior == "deny", command
