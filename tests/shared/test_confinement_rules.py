"""The pure rules of tool confinement: which directory a session works in, the sandboxed command's
environment (allow-listed, never a worker secret), its limits and its bubblewrap command line."""

from __future__ import annotations

import pytest

from agentbus_redis.confinement.bubblewrap import DropPrivileges, SandboxPlan, bubblewrap_argv
from agentbus_redis.confinement.environment import sandbox_environment, secret_names
from agentbus_redis.confinement.limits import SandboxLimits, limited_shell_argv
from agentbus_redis.confinement.workspaces import workspace_owner, workspace_relative_dir
from agentbus_redis.session_ids import InvalidSessionId

PARENT = "s-1"
CHILD = "s-1:agent-a0123456789abcdef"
GRANDCHILD = f"{CHILD}:agent-afedcba9876543210"


def test_session_scope_gives_every_session_its_own_directory() -> None:
    assert workspace_relative_dir(PARENT, "session") == "sessions/s-1"
    assert workspace_relative_dir(CHILD, "session") == f"sessions/{CHILD}"


def test_tree_scope_gives_sub_agents_their_root_sessions_directory() -> None:
    assert workspace_relative_dir(PARENT, "tree") == "sessions/s-1"
    assert workspace_relative_dir(CHILD, "tree") == "sessions/s-1"
    assert workspace_relative_dir(GRANDCHILD, "tree") == "sessions/s-1"


def test_shared_scope_is_the_root() -> None:
    assert workspace_owner(PARENT, "shared") is None
    assert workspace_relative_dir(PARENT, "shared") == ""


@pytest.mark.parametrize("bad", ["", "..", ".", "../etc", "a/b", "a\x00b", "/abs", "x" * 129])
@pytest.mark.parametrize("scope", ["session", "tree", "shared"])
def test_an_id_outside_the_grammar_never_becomes_a_path(bad: str, scope: str) -> None:
    with pytest.raises(InvalidSessionId):
        workspace_relative_dir(bad, scope)  # type: ignore[arg-type]


WORKER_ENV = {
    "PATH": "/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "REDIS_URL": "redis://:hunter2@127.0.0.1:6379/0",
    "AGENTBUS_INTERNAL_KEY": "k" * 64,
    "ANTHROPIC_API_KEY": "sk-ant-secret",
    "AWS_SECRET_ACCESS_KEY": "aws",
    "GITHUB_TOKEN": "ghp",
    "HOME": "/root",
}


def test_environment_is_the_allow_list_with_home_and_tmp() -> None:
    env = sandbox_environment(WORKER_ENV, ["PATH", "LANG", "TZ"], home="/ws/s-1")
    assert env == {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/ws/s-1", "TMPDIR": "/tmp"}


def test_secrets_never_pass_even_when_allow_listed() -> None:
    env = sandbox_environment(WORKER_ENV, list(WORKER_ENV), home="/ws")
    assert set(env) == {"PATH", "LANG", "HOME", "TMPDIR"}
    assert secret_names(list(WORKER_ENV)) == [
        "REDIS_URL",
        "AGENTBUS_INTERNAL_KEY",
        "ANTHROPIC_API_KEY",
        "AWS_SECRET_ACCESS_KEY",
        "GITHUB_TOKEN",
    ]


def test_environment_has_a_path_when_the_worker_has_none() -> None:
    assert sandbox_environment({}, ["PATH"], home="/ws")["PATH"].startswith("/usr/local/bin:")


def test_limits_become_hard_ulimits_before_the_command() -> None:
    limits = SandboxLimits(cpu_s=5, memory_mb=512, processes=64, open_files=256, file_size_mb=8)
    argv = limited_shell_argv("/bin/bash", "echo hi", limits)
    assert argv == [
        "/bin/bash",
        "-c",
        'ulimit -S -H -t 5 -v 524288 -u 64 -n 256 -f 8192 || exit 125; exec "$0" -c "$1"',
        "/bin/bash",
        "echo hi",
    ]
    unlimited = SandboxLimits(cpu_s=None, memory_mb=None, processes=None, open_files=None, file_size_mb=None)
    assert limited_shell_argv("/bin/bash", "x", unlimited)[2] == 'exec "$0" -c "$1"'


def _option_values(argv: list[str], option: str, count: int = 1) -> list[tuple[str, ...]]:
    return [tuple(argv[i + 1 : i + 1 + count]) for i, item in enumerate(argv) if item == option]


def test_bubblewrap_argv_of_an_unprivileged_worker() -> None:
    plan = SandboxPlan(bwrap="/usr/bin/bwrap", workspace="/srv/ws/sessions/s-1", system_paths=("/usr", "/etc"))
    argv = bubblewrap_argv(plan, "/bin/bash", "ls")
    command_at = argv.index("--")
    options = argv[:command_at]
    for flag in ("--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc", "--unshare-net"):
        assert flag in options
    assert "--unshare-user" in options
    assert _option_values(options, "--ro-bind-try", 2) == [("/usr", "/usr"), ("/etc", "/etc")]
    assert _option_values(options, "--bind", 2) == [("/srv/ws/sessions/s-1", "/srv/ws/sessions/s-1")]
    # The mount point's parents are searchable: the workspace is reachable by its absolute path too.
    assert _option_values(options, "--dir") == [("/srv",), ("/srv/ws",), ("/srv/ws/sessions",)]
    assert options[options.index("--dir") - 2 : options.index("--dir")] == ["--perms", "0755"]
    assert options.index("--bind") > max(i for i, item in enumerate(options) if item == "--dir")
    assert _option_values(options, "--chdir") == [("/srv/ws/sessions/s-1",)]
    assert options[options.index("--tmpfs") - 4 : options.index("--tmpfs") + 2] == [
        "--perms",
        "1777",
        "--size",
        str(256 * 1024 * 1024),
        "--tmpfs",
        "/tmp",
    ]
    # The private /tmp comes before the read-only paths, so one under /tmp stays visible.
    assert options.index("--tmpfs") < options.index("--ro-bind-try")
    assert _option_values(options, "--cap-drop") == [("ALL",)]
    assert argv[command_at + 1] == "/bin/bash"
    assert argv[-1] == "ls"


def test_a_deeper_read_only_path_gets_searchable_ancestors() -> None:
    """A sandboxed MCP server's virtualenv (issue 28): bwrap would make its parents 0700, out of the reach of
    the sandbox's user; they are made 0755 first, as the workspace's are."""
    plan = SandboxPlan(bwrap="bwrap", workspace="/ws", system_paths=("/usr", "/opt/venvs/mcp"))
    options = bubblewrap_argv(plan, "/bin/bash", "ls")
    options = options[: options.index("--")]
    assert _option_values(options, "--ro-bind-try", 2) == [("/usr", "/usr"), ("/opt/venvs/mcp", "/opt/venvs/mcp")]
    bind = options.index("/opt/venvs/mcp") - 1
    assert options[bind - 8 : bind] == ["--perms", "0755", "--dir", "/opt", "--perms", "0755", "--dir", "/opt/venvs"]


def test_bubblewrap_argv_of_a_root_worker_drops_to_the_sandbox_user() -> None:
    drop = DropPrivileges(uid=65534, gid=65534)
    plan = SandboxPlan(bwrap="bwrap", workspace="/ws", drop=drop)
    argv = bubblewrap_argv(plan, "/bin/bash", "ls")
    command_at = argv.index("--")
    assert "--unshare-user" not in argv[:command_at]  # bwrap as root mounts; the command gets its own userns
    assert _option_values(argv[:command_at], "--cap-add") == [("CAP_SETUID",), ("CAP_SETGID",)]
    tail = argv[command_at + 1 :]
    assert tail[: len(drop.argv())] == drop.argv()
    assert "--reuid=65534" in tail
    assert tail[tail.index("/usr/bin/unshare") + 1 : tail.index("/usr/bin/unshare") + 3] == [
        "--user",
        "--map-current-user",
    ]
