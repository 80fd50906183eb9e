"""Issue 29, bring your own tools, with every worker a real process (the model worker included) and the fake
Anthropic-compatible server scripting the model over real HTTP:

* a ``team`` pool runs only a team's tools: a module's (``--tools tests.integration.team_tools:tools``) and an
  installed package's (its ``agentbus.tools`` entry point, installed by ``uv pip install --target`` into a
  directory only that worker has on its path); the ``default`` pool runs the built-ins;
* the model calls them and gets their answers; one reply's parallel calls that span both pools get every
  result, in the order the calls were made;
* a SIGKILL of either pool's worker in the middle of such a reply loses nothing (a read-only call runs again,
  a side-effecting one is answered at most once with the placeholder);
* a tool no live worker offers is answered with Claude Code's ``No such tool available`` error.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from agentbus_redis.bus.events import LogEntry
from agentbus_redis.messages.constants import SYNTHETIC_TOOL_RESULT_PLACEHOLDER
from agentbus_redis.messages.content import ToolResultBlock
from agentbus_redis.messages.kinds import UserMessage
from agentbus_redis.stores.tool_catalog import read_catalog_snapshot
from agentbus_redis.streams.topology import Topology
from tests.integration.cluster import TEST_ALLOW_RULES, Worker, WorkerCluster, eventually
from tests.integration.fake_model import FakeModelProcess
from tests.integration.model_turns import (
    assert_every_tool_use_answered_once,
    reply,
    text,
    tool_use,
    turn_ended,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]
"""Seven worker processes start with the first test (the suite's 120 s is tight on a loaded machine)."""

REPO = Path(__file__).resolve().parents[2]
TEAM_ARGS = ("--pool", "team", "--no-builtins", "--tools", "tests.integration.team_tools:tools")
BUILTIN = ["Agent", "Bash", "Edit", "Glob", "Grep", "Read", "SendMessage", "Write"]


def install_team_package(target: Path) -> None:
    """``tests/tool_package`` installed into ``target`` (a ``--target`` install: nothing else sees it)."""
    uv = shutil.which("uv")
    command = [uv, "pip", "install"] if uv else [sys.executable, "-m", "pip", "install", "-q"]
    source = str(REPO / "tests" / "tool_package")
    offline = [*command, "--no-deps", "--offline", "--target", str(target), source] if uv else None
    if offline is not None and subprocess.run(offline, capture_output=True, check=False).returncode == 0:
        return
    subprocess.run([*command, "--no-deps", "--target", str(target), source], check=True, capture_output=True)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("team-site")
    install_team_package(target)
    return target


@pytest.fixture(scope="module")
def deployment(module_cluster: WorkerCluster, fake: FakeModelProcess, site: Path) -> WorkerCluster:
    module_cluster.extra_env.update(
        {
            "ANTHROPIC_API_KEY": "sk-ant-test",
            "AGENTBUS_MODEL__BASE_URL": fake.base_url,
            "AGENTBUS_MODEL__MODEL": "claude-sonnet-4-6",
            "AGENTBUS_TOOLS__TIMEOUT_S": "60",  # a Bash call outlives the kill of its worker
            "AGENTBUS_TOOLS__ALLOW": json.dumps([*TEST_ALLOW_RULES, "Bash(touch:*)"]),
        }
    )
    for name in ("ingestion", "normalization", "transcripts", "model", "tools"):
        module_cluster.start(name)
    start_team_worker(module_cluster, site)
    module_cluster.wait_ready(timeout_s=240)
    (module_cluster.workspace / "a.txt").write_text("alpha\n")
    return module_cluster


def start_team_worker(cluster: WorkerCluster, site: Path) -> Worker:
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    (worker,) = cluster.start("tools", args=TEAM_ARGS, env={"PYTHONPATH": path})
    return worker


def session_id(label: str) -> str:
    return f"pools-{label}-{uuid.uuid4().hex[:8]}"


def results_in_order(fake: FakeModelProcess, session: str, request_index: int) -> list[tuple[str, Any, bool]]:
    """The tool_results of the model's request ``request_index`` (its last user message), in their order:
    (tool_use_id, content, is_error)."""
    body = fake.requests(session)[request_index]["body"]
    last = body["messages"][-1]
    assert last["role"] == "user", last
    return [
        (block["tool_use_id"], block.get("content"), bool(block.get("is_error", False)))
        for block in last["content"]
        if block["type"] == "tool_result"
    ]


def content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(block.get("text", "") for block in content)


def logged_results(history: list[LogEntry]) -> dict[str, ToolResultBlock]:
    return {
        block.tool_use_id: block
        for entry in history
        if isinstance(entry.message, UserMessage)
        for block in entry.message.blocks
        if isinstance(block, ToolResultBlock)
    }


async def test_each_pool_offers_its_own_tools_and_the_model_is_offered_all(deployment: WorkerCluster) -> None:
    topology = Topology(deployment.names)
    async with aioredis.Redis.from_url(deployment.redis_url) as redis:
        snapshot = await read_catalog_snapshot(redis, topology)
    pools = {entry.pool: sorted(tool.name for tool in entry.tools) for entry in snapshot.live}
    assert pools == {"default": BUILTIN, "team": ["forecast", "hold", "shout"]}
    routes = snapshot.routes()
    assert (routes.pool_of("Read"), routes.pool_of("forecast"), routes.pool_of("shout")) == ("default", "team", "team")


async def test_a_module_tool_and_an_installed_packages_tool_are_called_and_answered(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    session = session_id("custom")
    fake.script(
        session,
        [
            reply(
                text("Checking."), tool_use("toolu_f", "forecast", city="Oslo"), tool_use("toolu_s", "shout", text="hi")
            ),
            reply(text("Sunny, and HI!")),
        ],
    )
    async with deployment.client() as bus:
        await bus.send_prompt(session, "weather in Oslo, and shout hi")
        history = await wait_for(bus, session, turn_ended, timeout_s=90)
    assert_every_tool_use_answered_once(history)
    offered = {tool["name"]: tool for tool in fake.requests(session)[0]["body"]["tools"]}
    assert offered["forecast"]["description"] == "Tomorrow's weather of a city."
    assert offered["forecast"]["input_schema"]["properties"]["city"] == {
        "type": "string",
        "description": "The city to report on",
    }
    assert offered["shout"]["description"] == "Say the text in capitals."
    assert set(BUILTIN) <= set(offered)
    assert [
        (tool_id, content_text(content), error) for tool_id, content, error in results_in_order(fake, session, 1)
    ] == [
        ("toolu_f", "Sunny in Oslo", False),
        ("toolu_s", "HI!", False),
    ]


async def test_parallel_calls_spanning_two_pools_get_every_result_in_call_order(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    session = session_id("parallel")
    fake.script(
        session,
        [
            reply(
                tool_use("toolu_1", "forecast", city="Rome"),
                tool_use("toolu_2", "Read", file_path="a.txt"),
                tool_use("toolu_3", "shout", text="x"),
                tool_use("toolu_4", "Glob", pattern="*.txt"),
                tool_use("toolu_5", "Teleport", to="Mars"),
            ),
            reply(text("Done.")),
        ],
    )
    async with deployment.client() as bus:
        await bus.send_prompt(session, "all at once")
        history = await wait_for(bus, session, turn_ended, timeout_s=90)
    assert_every_tool_use_answered_once(history)
    ordered = results_in_order(fake, session, 1)
    assert [tool_id for tool_id, _, _ in ordered] == ["toolu_1", "toolu_2", "toolu_3", "toolu_4", "toolu_5"]
    texts = {tool_id: content_text(content) for tool_id, content, _ in ordered}
    assert texts["toolu_1"] == "Sunny in Rome"
    assert "alpha" in texts["toolu_2"]
    assert texts["toolu_3"] == "X!"
    assert texts["toolu_4"].endswith("a.txt")
    # A tool no live worker offers: answered, with Claude Code's text, by a live worker.
    assert ordered[4] == ("toolu_5", "<tool_use_error>Error: No such tool available: Teleport</tool_use_error>", True)


async def test_a_killed_team_worker_loses_nothing(
    deployment: WorkerCluster, fake: FakeModelProcess, site: Path, tmp_path: Path
) -> None:
    """The team pool's only worker dies while ``hold`` runs; a new one takes the job over and runs the read-only
    call again; the built-in call of the same reply was answered by the other pool all along."""
    session = session_id("kill-team")
    marker, release = tmp_path / "hold-started", tmp_path / "hold-release"
    fake.script(
        session,
        [
            reply(
                tool_use("toolu_r", "Read", file_path="a.txt"),
                tool_use("toolu_h", "hold", marker=str(marker), release=str(release)),
                tool_use("toolu_f", "forecast", city="Paris"),
            ),
            reply(text("All back.")),
        ],
    )
    (team,) = [w for w in deployment.of("tools") if "--no-builtins" in w.process.args]  # type: ignore[operator]
    async with deployment.client() as bus:
        await bus.send_prompt(session, "hold on")
        await eventually(_exists(marker), timeout_s=90)
        deployment.kill(team)
        marker.unlink()
        deployment.wait_ready(workers=[start_team_worker(deployment, site)])
        await eventually(_exists(marker), timeout_s=90)  # the new worker runs the call again
        release.touch()
        history = await wait_for(bus, session, turn_ended, timeout_s=90)
    assert_every_tool_use_answered_once(history)
    ordered = [
        (tool_id, content_text(content), error) for tool_id, content, error in results_in_order(fake, session, 1)
    ]
    assert [tool_id for tool_id, _, _ in ordered] == ["toolu_r", "toolu_h", "toolu_f"]
    assert "alpha" in ordered[0][1]
    assert ordered[1:] == [("toolu_h", "released after hold-started", False), ("toolu_f", "Sunny in Paris", False)]


async def test_a_killed_builtin_worker_loses_nothing_and_runs_a_side_effect_at_most_once(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    """The default pool's only worker dies while Bash runs: the new one answers that call with the placeholder
    (it may have run: at most once), and the team pool's call of the same reply has its real result."""
    session = session_id("kill-builtin")
    marker = deployment.workspace / f"bash-started-{uuid.uuid4().hex[:6]}"
    fake.script(
        session,
        [
            reply(
                tool_use("toolu_b", "Bash", command=f"touch {marker.name} && sleep 30", description="Wait"),
                tool_use("toolu_f", "forecast", city="Lima"),
            ),
            reply(text("Recovered.")),
        ],
    )
    (builtin,) = [w for w in deployment.of("tools") if "--no-builtins" not in w.process.args]  # type: ignore[operator]
    async with deployment.client() as bus:
        await bus.send_prompt(session, "run it")
        await eventually(_exists(marker), timeout_s=90)
        deployment.kill(builtin)
        deployment.wait_ready(workers=deployment.start("tools"))
        history = await wait_for(bus, session, turn_ended, timeout_s=90)
    assert_every_tool_use_answered_once(history)
    ordered = results_in_order(fake, session, 1)
    assert [tool_id for tool_id, _, _ in ordered] == ["toolu_b", "toolu_f"]
    assert (content_text(ordered[0][1]), ordered[0][2]) == (SYNTHETIC_TOOL_RESULT_PLACEHOLDER, True)
    assert (content_text(ordered[1][1]), ordered[1][2]) == ("Sunny in Lima", False)
    assert logged_results(history)["toolu_b"].is_error


def _exists(path: Path) -> Any:
    async def check() -> bool:
        return path.exists()

    return check
