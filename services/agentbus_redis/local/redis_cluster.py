"""Start a private Redis Cluster on loopback ports: for the test suite and ``bench/pipeline.py --cluster``.

Each node is a ``redis-server --cluster-enabled yes`` child process with its own port and directory; the
cluster is formed by ``redis-cli --cluster create`` (the default, even split of the 16 384 slots over the
masters, each master followed by ``replicas`` replicas) and is ready once every node reports
``cluster_state:ok`` and agrees on the slot map. A short ``cluster-node-timeout`` makes a failover take
about a second instead of fifteen.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from agentbus_redis.local.redis_server import RedisServerUnavailable, free_port, is_reachable, server_args, stop_process

NODE_TIMEOUT_MS = 1000
"""``cluster-node-timeout``: a master unreachable this long is failed over to its replica."""


@dataclass
class ClusterNodeProcess:
    """One ``redis-server`` of the cluster."""

    port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)

    def start(self, binary: str) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        cluster_options = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            str(self.directory / "nodes.conf"),
            "--cluster-node-timeout",
            str(NODE_TIMEOUT_MS),
            # A replica may always take over: with a 1 s node timeout the default factor (10) would call an
            # idle replica's data too old to fail over ("Disconnected from master for longer than allowed").
            "--cluster-replica-validity-factor",
            "0",
            "--repl-diskless-sync-delay",
            "0",  # a replica's first full sync at once, not after the default 5 s
        ]
        args = server_args(binary, self.port, self.directory, appendonly=False, extra=cluster_options)
        self.process = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )

    def stop(self, *, kill: bool = False) -> None:
        stop_process(self.process, kill=kill)


@dataclass
class LocalRedisCluster:
    """``masters`` masters with ``replicas`` replicas each, on free loopback ports under ``directory``."""

    directory: Path
    masters: int = 3
    replicas: int = 0
    nodes: list[ClusterNodeProcess] = field(default_factory=list)

    @property
    def url(self) -> str:
        """The agentbus URL of the cluster (``redis+cluster://``, see ``redis_client.py``): any node seeds it."""
        seeds = ",".join(node.address for node in self.nodes[1:])
        query = f"?seeds={seeds}" if seeds else ""
        return f"redis+cluster://{self.nodes[0].address}{query}"

    def start(self, *, timeout_s: float = 30.0) -> LocalRedisCluster:
        server = shutil.which("redis-server")
        cli = shutil.which("redis-cli")
        if server is None or cli is None:
            msg = "redis-server and redis-cli are needed for a local cluster (apt-get install redis-server)"
            raise RedisServerUnavailable(msg)
        self.directory = self.directory.resolve()
        count = self.masters * (1 + self.replicas)
        self.nodes = [ClusterNodeProcess(port, self.directory / str(port)) for port in _free_ports(count)]
        for node in self.nodes:
            node.start(server)
        deadline = time.monotonic() + timeout_s
        try:
            for node in self.nodes:
                _wait(lambda node=node: is_reachable(f"redis://{node.address}/0", timeout_s=0.2), deadline, node)
            create = [cli, "--cluster", "create", *(node.address for node in self.nodes)]
            create += ["--cluster-replicas", str(self.replicas), "--cluster-yes"]
            subprocess.run(create, check=True, capture_output=True, timeout=timeout_s)
            self.wait_ok(deadline=deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ok(self, *, deadline: float | None = None, timeout_s: float = 30.0) -> None:
        """Until every running node says ``cluster_state:ok`` and they all report the same slot owners."""
        end = deadline if deadline is not None else time.monotonic() + timeout_s
        _wait(self._settled, end, None)

    def wait_failed_over(self, node: ClusterNodeProcess, *, timeout_s: float = 60.0) -> None:
        """Until the stopped ``node`` serves no slot any more (its replica took over) and the cluster is ok
        again. (Right after a kill the cluster still says ok: failure detection takes a node timeout.)"""
        end = time.monotonic() + timeout_s
        _wait(lambda: self._settled(without=node.port), end, None)

    def _replicas_in_sync(self) -> bool:
        for node in self.nodes:
            if node.running:
                with node.client() as client:
                    info = client.info("replication")
                if info.get("role") == "slave" and info.get("master_link_status") != "up":
                    return False
        return True

    def _settled(self, *, without: int | None = None) -> bool:
        if not self._replicas_in_sync():
            return False
        maps = set()
        for node in self.nodes:
            if not node.running:
                continue
            with node.client() as client:
                try:
                    info = client.execute_command("CLUSTER", "INFO")
                    slots = client.execute_command("CLUSTER", "SLOTS")
                except (redis.RedisError, OSError):
                    return False
            text = info.decode() if isinstance(info, bytes) else str(info)
            if "cluster_state:ok" not in text:
                return False
            owners = tuple(sorted((int(row[0]), int(row[1]), int(row[2][1])) for row in slots))
            if any(port == without for _, _, port in owners):
                return False
            maps.add(owners)
        return len(maps) == 1

    def master_of_slot(self, slot: int) -> ClusterNodeProcess:
        """The running node that serves ``slot`` now."""
        for node in self.nodes:
            if not node.running:
                continue
            with node.client() as client:
                for row in client.execute_command("CLUSTER", "SLOTS"):
                    if int(row[0]) <= slot <= int(row[1]):
                        port = int(row[2][1])
                        return next(n for n in self.nodes if n.port == port)
        msg = f"no running node serves slot {slot}"
        raise LookupError(msg)

    def node_id(self, node: ClusterNodeProcess) -> str:
        with node.client() as client:
            return str(client.execute_command("CLUSTER", "MYID").decode())

    def move_slot(
        self, slot: int, target: ClusterNodeProcess, *, keys_per_step: int = 100, pause_s: float = 0.0
    ) -> int:
        """Reshard ``slot`` to ``target`` as ``redis-cli --cluster reshard`` does: ``SETSLOT IMPORTING`` /
        ``MIGRATING``, ``MIGRATE`` its keys ``keys_per_step`` at a time (sleeping ``pause_s`` between steps,
        so clients meet the ``ASK``/``TRYAGAIN`` states), then ``SETSLOT NODE`` on every master. Returns how
        many keys moved."""
        source = self.master_of_slot(slot)
        if source.port == target.port:
            return 0
        source_id, target_id = self.node_id(source), self.node_id(target)
        moved = 0
        with source.client() as out, target.client() as into:
            into.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
            out.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
            while keys := out.execute_command("CLUSTER", "GETKEYSINSLOT", slot, keys_per_step):
                out.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
                moved += len(keys)
                time.sleep(pause_s)
            into.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
            out.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
        for node in self.nodes:
            if node.running and node.port not in (source.port, target.port):
                with node.client() as client, contextlib.suppress(redis.ResponseError):
                    client.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
        return moved

    def restart(self, node: ClusterNodeProcess) -> None:
        """Start a stopped node again on its port and directory: it rejoins (a failed-over master comes back
        as a replica of its successor)."""
        server = shutil.which("redis-server")
        assert server is not None
        node.start(server)
        self.wait_ok()

    def masters_now(self) -> list[ClusterNodeProcess]:
        """The running nodes that are masters now."""
        masters = []
        for node in self.nodes:
            if node.running:
                with node.client() as client:
                    if client.info("replication").get("role") == "master":
                        masters.append(node)
        return masters

    def flushall(self) -> None:
        """Empty every master (replicas follow)."""
        for node in self.nodes:
            if not node.running:
                continue
            with node.client() as client:
                if client.info("replication").get("role") == "master":
                    client.flushall()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


CLUSTER_BUS_PORT_OFFSET = 10_000
"""A cluster node's bus port is its port plus this (Redis's default)."""


def _free_ports(count: int) -> list[int]:
    """``count`` distinct free ports whose cluster bus ports (port + 10000) are free too."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port(headroom=CLUSTER_BUS_PORT_OFFSET)
        if port not in ports:
            ports.append(port)
    return ports


def _wait(ready: object, deadline: float, node: ClusterNodeProcess | None) -> None:
    while not ready():  # type: ignore[operator]
        if node is not None and node.process is not None and node.process.poll() is not None:
            msg = f"redis-server exited with {node.process.returncode}; see {node.directory / 'redis.log'}"
            raise RedisServerUnavailable(msg)
        if time.monotonic() > deadline:
            msg = "the local Redis Cluster did not come up in time"
            raise RedisServerUnavailable(msg)
        time.sleep(0.05)


def start_local_cluster(directory: Path | None = None, *, masters: int = 3, replicas: int = 0) -> LocalRedisCluster:
    """Start a private cluster in ``directory`` (a fresh temp dir by default)."""
    root = directory if directory is not None else Path(tempfile.mkdtemp(prefix="agentbus-cluster-"))
    return LocalRedisCluster(root, masters=masters, replicas=replicas).start()
