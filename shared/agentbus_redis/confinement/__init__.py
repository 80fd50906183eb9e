"""Pure rules of tool confinement: where a session's workspace lives, what environment and limits a
sandboxed command gets, and the bubblewrap command line that enforces them (I/O in ``agentbus_redis.sandbox``)."""

from agentbus_redis.confinement.bubblewrap import DEFAULT_SYSTEM_PATHS, DropPrivileges, SandboxPlan, bubblewrap_argv
from agentbus_redis.confinement.environment import (
    DEFAULT_ENV_ALLOW,
    SecretInAllowList,
    sandbox_environment,
    secret_names,
)
from agentbus_redis.confinement.limits import SandboxLimits, closing_descriptors_argv, limited_shell_argv
from agentbus_redis.confinement.workspaces import WorkspaceScope, workspace_owner, workspace_relative_dir

__all__ = [
    "DEFAULT_ENV_ALLOW",
    "DEFAULT_SYSTEM_PATHS",
    "DropPrivileges",
    "SandboxLimits",
    "SandboxPlan",
    "SecretInAllowList",
    "WorkspaceScope",
    "bubblewrap_argv",
    "closing_descriptors_argv",
    "limited_shell_argv",
    "sandbox_environment",
    "secret_names",
    "workspace_owner",
    "workspace_relative_dir",
]
