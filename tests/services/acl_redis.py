"""A private ``redis-server`` started with ``--aclfile deploy/redis/users.acl``, as compose runs it.

The ACL file turns the default user off, so ``LocalRedis`` (which pings as the default user) cannot be
used; this starts the server itself and waits for the ``operator`` user to answer.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import redis

from agentbus_redis.local.redis_server import free_port
from tests.conftest import REPO_ROOT

ACL_FILE = REPO_ROOT / "deploy" / "redis" / "users.acl"


def dev_password(user: str) -> str:
    """The development password of ``user`` (deploy/redis/users.acl stores its sha256)."""
    return f"agentbus-{user}-dev"


@dataclass
class AclRedis:
    port: int
    directory: Path
    process: subprocess.Popen[bytes]

    def url(self, user: str) -> str:
        return f"redis://{user}:{dev_password(user)}@127.0.0.1:{self.port}/0"

    def client(self, user: str) -> redis.Redis:
        return redis.Redis(port=self.port, username=user, password=dev_password(user))

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)


def start_acl_redis(directory: Path, *, attempts: int = 500) -> AclRedis:
    binary = shutil.which("redis-server")
    if binary is None:
        msg = "redis-server is not installed"
        raise RuntimeError(msg)
    directory.mkdir(parents=True, exist_ok=True)
    acl_copy = directory / "users.acl"
    shutil.copyfile(ACL_FILE, acl_copy)
    port = free_port()
    log_file = directory / "redis.log"
    args = [binary, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(directory), "--save", ""]
    args += ["--appendonly", "no", "--aclfile", str(acl_copy), "--logfile", str(log_file)]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = AclRedis(port, directory, process)
    operator = server.client("operator")
    try:
        for _ in range(attempts):
            if process.poll() is not None:
                msg = f"redis-server refused the ACL file: {log_file.read_text(errors='replace')}"
                raise RuntimeError(msg)
            try:
                operator.ping()
                return server
            except (redis.ConnectionError, redis.AuthenticationError):
                time.sleep(0.02)
    finally:
        operator.close()
    server.stop()
    msg = f"redis-server on port {port} did not answer"
    raise RuntimeError(msg)
