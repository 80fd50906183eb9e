"""Test-wide fixtures.

Redis: every test session (every xdist worker) runs its own ``redis-server`` on a free port, so the
suite never touches a developer's Redis and never skips because none is running. Each test that asks
for ``redis_url`` gets a flushed logical database of that private server.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from agentbus_redis.local.redis_cluster import LocalRedisCluster, start_local_cluster
from agentbus_redis.local.redis_server import LocalRedis, start_local_redis
from agentbus_redis.runtime import redis_client
from tests.integration.cluster import WorkerCluster

pytest_plugins = ["tests.fake_model_fixture"]

# No wall-clock limit on a property test's examples: on a loaded 2-core machine a 200 ms deadline is noise.
hypothesis_settings.register_profile("agentbus", deadline=None, suppress_health_check=[HealthCheck.too_slow])
hypothesis_settings.load_profile("agentbus")

REPO_ROOT = Path(__file__).resolve().parent.parent
REFERENCE_ROOT = REPO_ROOT.parent / "shared"
CORPUS_ROOT = Path(os.environ.get("AGENTBUS_CORPUS", REFERENCE_ROOT / "corpus"))
CORPUS_MISSING = f"third-party transcript corpus not found at {CORPUS_ROOT} (set AGENTBUS_CORPUS to run these)"
"""Why corpus tests skip: the corpus is third-party data kept beside the repository, never in it."""

requires_corpus = pytest.mark.skipif(not CORPUS_ROOT.is_dir(), reason=CORPUS_MISSING)
"""Marks a test that reads corpus files by path (tests taking ``corpus_root`` skip by themselves)."""


def corpus_cases(dialect: str) -> list[Any]:
    """The corpus files of ``dialect`` (``claude-code``, ``pi``) to parametrize over; where the corpus is
    absent, one case that is skipped with the reason (an empty parameter set would hide it)."""
    if not CORPUS_ROOT.is_dir():
        return [pytest.param(None, marks=pytest.mark.skip(reason=CORPUS_MISSING), id="corpus-missing")]
    return sorted((CORPUS_ROOT / dialect).rglob("*.jsonl"))


@pytest.fixture(scope="session")
def corpus_root() -> Path:
    """The reference transcript corpus beside the repository (never copied into it)."""
    if not CORPUS_ROOT.is_dir():
        pytest.skip(CORPUS_MISSING)
    return CORPUS_ROOT


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRedis]:
    """A private redis-server for this test session."""
    server = start_local_redis(tmp_path_factory.mktemp("redis"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRedisCluster]:
    """A private 3-master Redis Cluster (no replicas) for this test session, started on first use (~2 s)."""
    nodes = start_local_cluster(tmp_path_factory.mktemp("redis-cluster"))
    try:
        yield nodes
    finally:
        nodes.stop()


@pytest.fixture
def failover_cluster(tmp_path: Path) -> Iterator[LocalRedisCluster]:
    """A private 3-master cluster with one replica per master, for a test that kills or moves nodes."""
    nodes = start_local_cluster(tmp_path / "redis-cluster", replicas=1)
    try:
        yield nodes
    finally:
        nodes.stop()


REDIS_TARGETS = ["single", "cluster"]
"""What the parametrised integration tests run against (issue 20): one Redis, a 3-master cluster."""


@pytest.fixture(scope="module")
def redis_target(request: pytest.FixtureRequest) -> str:
    """``single`` unless a module parametrises it (``pytestmark = ON_EVERY_TARGET``)."""
    return str(getattr(request, "param", "single"))


ON_EVERY_TARGET = pytest.mark.parametrize("redis_target", REDIS_TARGETS, indirect=True, scope="module")
"""Runs a test (module) once on a single Redis and once on the cluster; ``cluster`` and ``module_cluster``
then point their workers at that target."""


def on_targets(
    argname: str, cases: list[Any], *, cluster_cases: list[Any] | None = None, ids: Callable[[Any], str] = str
) -> pytest.MarkDecorator:
    """Parametrise ``argname`` over ``cases`` on one Redis and over ``cluster_cases`` (all of ``cases`` by
    default) on the cluster: the cluster variants of a long module may run a subset."""
    on_cluster = cases if cluster_cases is None else cluster_cases
    params = [_with_target(case, "single", ids) for case in cases]
    params += [_with_target(case, "cluster", ids) for case in on_cluster]
    return pytest.mark.parametrize((argname, "redis_target"), params, indirect=["redis_target"], scope="module")


def _with_target(case: Any, target: str, ids: Callable[[Any], str]) -> Any:
    if isinstance(case, type(pytest.param(None))):  # e.g. the skipped "corpus missing" case
        return pytest.param(*case.values, target, marks=case.marks, id=f"{case.id}-{target}")
    return pytest.param(case, target, id=f"{ids(case)}-{target}")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the work-unit marks this adds (loadgroup)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order the tests and cut them into xdist work units (``--dist loadgroup``, see docs/how-to/develop.md).

    - Within each module, every single-Redis test before every cluster test (stable otherwise), so a
      module-scoped deployment per target is started once, not each time the target alternates.
    - A test that uses a module-scoped fixture (a worker deployment, the fake model process) is one work
      unit with the other tests of its module on the same target: the deployment starts once. Any other
      test is a work unit of its own, so the tests of a long module (crash safety: eight worker
      processes each) run on both xdist workers at once.
    - Slow modules first, then the other integration tests, then the rest: the long work units start
      while the many short ones are still queued to fill the gaps, instead of ending the run alone.
    """
    modules: dict[str, int] = {}
    for item in items:
        modules.setdefault(_module_of(item), len(modules))

    def key(item: pytest.Item) -> tuple[int, int, int]:
        return _cost_rank(item), modules[_module_of(item)], REDIS_TARGETS.index(_target_of(item))

    items.sort(key=key)
    for item in items:
        if _uses_module_state(item):
            item.add_marker(pytest.mark.xdist_group(f"{item.nodeid.split('::')[0]}:{_target_of(item)}"))


def _module_of(item: pytest.Item) -> str:
    module = getattr(item, "module", None)
    return module.__name__ if module is not None else ""


def _target_of(item: pytest.Item) -> str:
    callspec = getattr(item, "callspec", None)
    return str(callspec.params.get("redis_target", "single")) if callspec is not None else "single"


def _cost_rank(item: pytest.Item) -> int:
    """0 for a test marked ``slow``, 1 for another integration test (real Redis, processes), 2 otherwise."""
    if item.get_closest_marker("slow") is not None:
        return 0
    if item.get_closest_marker("integration") is not None or "/integration/" in item.nodeid:
        return 1
    return 2


MODULE_STATE_SCOPES = frozenset({"module", "class", "package"})
FREE_MODULE_FIXTURES = frozenset({"redis_target"})
"""Module-scoped but free to set up again on another xdist worker (a parameter, nothing started); so is
the value of a direct parameter that ``parametrize(..., scope="module")`` turns into a fixture."""


def _uses_module_state(item: pytest.Item) -> bool:
    """Whether ``item`` uses a fixture set up once per module (or class): its module's tests on the same
    target then stay on one xdist worker."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(
        definition.scope in MODULE_STATE_SCOPES and definition.func.__name__ != "get_direct_param_fixture_func"
        for name, definitions in info.name2fixturedefs.items()
        if name not in FREE_MODULE_FIXTURES
        for definition in definitions
    )


def flushed_target_url(request: pytest.FixtureRequest, target: str) -> str:
    """The emptied ``redis://`` (``single``) or ``redis+cluster://`` (``cluster``) URL of a test target."""
    if target == "cluster":
        nodes: LocalRedisCluster = request.getfixturevalue("redis_cluster")
        nodes.flushall()
        return nodes.url
    server: LocalRedis = request.getfixturevalue("redis_server")
    with redis.Redis.from_url(server.url) as client:
        client.flushall()
    return server.url


@pytest.fixture
def redis_url(redis_server: LocalRedis) -> Iterator[str]:
    """URL of a flushed database on the private server; flushed again afterwards."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    try:
        yield redis_server.url
    finally:
        client.flushall()
        client.close()


@pytest.fixture
async def aredis(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    """An asyncio client on the test database: the bus's own (runtime/redis_client.py), not redis-py's defaults,
    whose socket timeout loses cancels on Python 3.11 — a test that cancels a task using this client and awaits
    its end (``test_runtime_lanes.py``'s crashed owner) then hung until the test's timeout."""
    client = redis_client.connect(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
def cluster(redis_target: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[WorkerCluster]:
    """Worker processes against the emptied test Redis (or cluster: ``redis_target``); the test starts the
    ones it needs."""
    workers = WorkerCluster(redis_url=flushed_target_url(request, redis_target), root=tmp_path)
    try:
        yield workers
    finally:
        workers.stop()
        flushed_target_url(request, redis_target)
