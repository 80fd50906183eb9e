"""Every code example of README.md and docs/ runs as written (issue 27): each Python block as a script against
a real bus — a private Redis, the five worker types and the fake model server (echo script) — and each shell
block as a script in a directory holding a real transcript (``session.jsonl``); JSON and TOML blocks parse.
A block that cannot run here says why in a ``<!-- not-run: … -->`` line; a Python block never may."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from agentbus_redis.stores.tool_catalog import READ_MAX_AGE_S, read_catalog_snapshot
from agentbus_redis.streams.topology import Topology
from tests.docs.examples import DOCS, OUTPUT, PARSED, README, SHELL, Block, all_blocks, blocks_of, shell_script
from tests.integration.cluster import WorkerCluster, eventually
from tests.integration.fake_model import FakeModelProcess
from tests.integration.model_turns import reply, text, tool_use, turn_ended, wait_for
from tests.shared.generated_sessions import tool_rounds_session

BLOCKS = all_blocks()
PYTHON = [block for block in BLOCKS if block.language == "python"]
RUN_SHELL = [block for block in BLOCKS if block.language in SHELL and block.not_run is None]
PARSE = [block for block in BLOCKS if block.language in PARSED]
RUN_TIMEOUT_S = 240  # a guard against a hang, not a bound on speed


def ids(blocks: list[Block]) -> list[str]:
    return [block.id for block in blocks]


def test_every_block_runs_or_says_why_not() -> None:
    problems = []
    for block in BLOCKS:
        if block.language == "python" and block.not_run is not None:
            problems.append(f"{block.id}: a Python example must run, not be marked not-run")
        known = block.language in {"python", *SHELL, *PARSED, *OUTPUT}
        if not known and block.not_run is None:
            problems.append(f"{block.id}: ```{block.language or '(no language)'} needs a <!-- not-run: reason -->")
    assert problems == []
    assert PYTHON  # the collection found what it runs
    assert RUN_SHELL


@pytest.mark.parametrize("block", PARSE, ids=ids(PARSE))
def test_json_and_toml_examples_parse(block: Block) -> None:
    if block.language == "json":
        json.loads(block.code)
    else:
        tomllib.loads(block.code)


@pytest.fixture(scope="module")
def deployment(module_cluster: WorkerCluster, fake: FakeModelProcess) -> WorkerCluster:
    module_cluster.extra_env.update(
        {"ANTHROPIC_API_KEY": "sk-ant-test", "AGENTBUS_MODEL__BASE_URL": fake.base_url, "LOG_LEVEL": "WARNING"}
    )
    for name in ("ingestion", "normalization", "transcripts", "tools", "model"):
        module_cluster.start(name)
    module_cluster.wait_ready()
    (module_cluster.workspace / "README.md").write_text("# demo workspace\n", encoding="utf-8")
    return module_cluster


def run(command: list[str], deployment: WorkerCluster, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = deployment.env()
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # `agentbus` of this checkout
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(600)  # the first test starts the deployment: five workers on a loaded machine
@pytest.mark.parametrize("block", PYTHON, ids=ids(PYTHON))
def test_python_example_runs(block: Block, deployment: WorkerCluster, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(block.code, encoding="utf-8")
    done = run([sys.executable, str(script)], deployment, tmp_path)
    assert done.returncode == 0, f"{block.id} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("block", RUN_SHELL, ids=ids(RUN_SHELL))
def test_shell_example_runs(block: Block, deployment: WorkerCluster, tmp_path: Path) -> None:
    (tmp_path / "session.jsonl").write_bytes(tool_rounds_session(2, session="docs-example"))
    done = run(["bash", "-euo", "pipefail", "-c", shell_script(block)], deployment, tmp_path)
    assert done.returncode == 0, f"{block.id} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_sdk_tutorials_program_gets_its_own_prompts_request(deployment: WorkerCluster, tmp_path: Path) -> None:
    """The tutorial's first program, twice on the same session: the second run gets the request its own
    prompt led to, never the first run's (what ``send_prompt_and_wait``/``next_request`` promise)."""
    tutorial = next(block for block in blocks_of(DOCS / "tutorials" / "sdk.md") if block.language == "python")
    script = tmp_path / "sdk_example.py"
    script.write_text(tutorial.code, encoding="utf-8")
    first = run([sys.executable, str(script)], deployment, tmp_path)
    second = run([sys.executable, str(script)], deployment, tmp_path)
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    first_seq, second_seq = (int(done.stdout.split()[0]) for done in (first, second))
    assert second_seq > first_seq


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_the_readmes_tool_runs_in_its_own_pool_and_answers_the_model(
    deployment: WorkerCluster, fake: FakeModelProcess, tmp_path: Path
) -> None:
    """Issue 29: the README's custom tool, end to end: its file, started with the command its comment gives, is
    offered to the model, which calls it and reads its answer."""
    block = next(block for block in blocks_of(README) if "weather_tools.py" in block.code)
    (tmp_path / "weather_tools.py").write_text(block.code, encoding="utf-8")
    command = next(line for line in block.code.splitlines() if "agentbus worker tools" in line)
    args = command.split("agentbus worker tools", 1)[1].split()
    (worker,) = deployment.start("tools", args=args, env={"PYTHONPATH": str(tmp_path)})
    deployment.wait_ready(workers=[worker])
    await offered_everywhere(deployment, "weather")
    session = "readme-weather"
    fake.script(session, [reply(tool_use("toolu_weather", "weather", city="Oslo")), reply(text("Sunny in Oslo."))])
    async with deployment.client() as bus:
        await bus.send_prompt(session, "what is the weather in Oslo?")
        await wait_for(bus, session, turn_ended, timeout_s=120)
    (request, answered) = fake.requests(session)
    assert "weather" in {tool["name"] for tool in request["body"]["tools"]}
    (result,) = [block for block in answered["body"]["messages"][-1]["content"] if block["type"] == "tool_result"]
    assert result["tool_use_id"] == "toolu_weather"
    assert result["content"] in ("It is sunny in Oslo.", [{"type": "text", "text": "It is sunny in Oslo."}])


async def offered_everywhere(deployment: WorkerCluster, tool: str) -> None:
    """Until ``tool`` is in the catalog, and then as long as the readers' cache may still hold an older read (the
    model worker offers, and ingestion routes, what they read at most ``READ_MAX_AGE_S`` ago)."""
    async with aioredis.Redis.from_url(deployment.redis_url) as redis:
        topology = Topology(deployment.names)

        async def in_catalog() -> bool:
            snapshot = await read_catalog_snapshot(redis, topology)
            return any(t.name == tool for entry in snapshot.live for t in entry.tools)

        await eventually(in_catalog, timeout_s=60)
    await asyncio.sleep(READ_MAX_AGE_S)
