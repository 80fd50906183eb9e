"""Pure rules of tool confinement: where a session's workspace lives, what environment and limits a
sandboxed command gets, which hosts it may reach through the worker's proxy, and the bubblewrap command line
that enforces them (I/O in ``agentbus_redis.sandbox``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentbus_redis.lazy_facade import lazy_facade

if TYPE_CHECKING:
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
    from agentbus_redis.confinement.limits import (
        SandboxLimits,
        closing_descriptors_argv,
        dying_with_worker_argv,
        limited_shell_argv,
    )
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
    "dying_with_worker_argv",
    "limited_shell_argv",
    "normalize_host",
    "proxy_environment",
    "sandbox_environment",
    "secret_names",
    "session_network_policy",
    "workspace_owner",
    "workspace_relative_dir",
]

_MODULE_OF = {
    "DEFAULT_ENV_ALLOW": "environment",
    "DEFAULT_SYSTEM_PATHS": "bubblewrap",
    "DomainNotAllowed": "network",
    "DomainPattern": "network",
    "DropPrivileges": "bubblewrap",
    "InvalidDomainPattern": "network",
    "InvalidSessionNetwork": "session_network",
    "NetworkBridge": "bubblewrap",
    "NetworkPolicy": "network",
    "SandboxLimits": "limits",
    "SandboxPlan": "bubblewrap",
    "SecretInAllowList": "environment",
    "SessionSandboxNetwork": "session_network",
    "WorkspaceScope": "workspaces",
    "bubblewrap_argv": "bubblewrap",
    "closing_descriptors_argv": "limits",
    "dying_with_worker_argv": "limits",
    "limited_shell_argv": "limits",
    "normalize_host": "network",
    "proxy_environment": "network",
    "sandbox_environment": "environment",
    "secret_names": "environment",
    "session_network_policy": "session_network",
    "workspace_owner": "workspaces",
    "workspace_relative_dir": "workspaces",
}


# Lazy: the settings every command reads import a few constants from here, not the session network's model.
__getattr__, __dir__ = lazy_facade(globals(), _MODULE_OF)
