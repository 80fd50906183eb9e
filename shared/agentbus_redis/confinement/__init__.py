"""Pure rules of tool confinement: where a session's workspace lives, what environment and limits a
sandboxed command gets, which hosts it may reach through the worker's proxy, and the bubblewrap command line
that enforces them (I/O in ``agentbus_redis.sandbox``)."""

from agentbus_redis.confinement.bubblewrap import (
    DEFAULT_SYSTEM_PATHS,
    DropPrivileges,
    NetworkBridge,
    SandboxPlan,
    bubblewrap_argv,
)
from agentbus_redis.confinement.environment import (
    DEFAULT_ENV_ALLOW,
    SecretInAllowList,
    sandbox_environment,
    secret_names,
)
from agentbus_redis.confinement.limits import SandboxLimits, closing_descriptors_argv, limited_shell_argv
from agentbus_redis.confinement.network import (
    DomainNotAllowed,
    DomainPattern,
    InvalidDomainPattern,
    NetworkPolicy,
    normalize_host,
    proxy_environment,
)
from agentbus_redis.confinement.session_network import (
    InvalidSessionNetwork,
    SessionSandboxNetwork,
    session_network_policy,
)
from agentbus_redis.confinement.workspaces import WorkspaceScope, workspace_owner, workspace_relative_dir

__all__ = [
    "DEFAULT_ENV_ALLOW",
    "DEFAULT_SYSTEM_PATHS",
    "DomainNotAllowed",
    "DomainPattern",
    "DropPrivileges",
    "InvalidDomainPattern",
    "InvalidSessionNetwork",
    "NetworkBridge",
    "NetworkPolicy",
    "SandboxLimits",
    "SandboxPlan",
    "SecretInAllowList",
    "SessionSandboxNetwork",
    "WorkspaceScope",
    "bubblewrap_argv",
    "closing_descriptors_argv",
    "limited_shell_argv",
    "normalize_host",
    "proxy_environment",
    "sandbox_environment",
    "secret_names",
    "session_network_policy",
    "workspace_owner",
    "workspace_relative_dir",
]
