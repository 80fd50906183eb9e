"""What the bubblewrap sandbox adds to a Bash call (issue 28): the same commands run by the Bash tool with
and without the sandbox, interleaved, in one process on the loop the tool worker runs (uvloop).

    uv run python bench/sandbox_cost.py               # ~30 s
    uv run python bench/sandbox_cost.py --calls 200

Measured per call: from the tool's ``call`` until its result (spawn, the command, the pipes drained, the
process reaped). Unsandboxed: ``bash -c`` behind the descriptor-closing exec. Sandboxed: the worker's
sandbox as this process would build it (as root: bwrap as root, ``setpriv`` to nobody, ``unshare --user``,
the limits set, then the command). Bridged: the same sandbox when the deployment allow-lists a domain (the
bridge to the worker's proxy started before the command; the commands here make no request). Narrowed: bridged
for a session whose own allow-list narrows the deployment's (the proxy serves it on a socket made for the
command and removed after it). The figure is
the ratio of the medians and the added milliseconds, per command; a command that does real work pays the
same absolute cost, a smaller share of it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentbus_redis.confinement.network import NetworkPolicy
from agentbus_redis.sandbox.proxy import DomainProxy
from agentbus_redis.sandbox.runner import Sandbox
from agentbus_redis.tools.tool import ToolContext, ToolOutput
from agentbus_redis.workers.tools.builtin.bash import BashTool
from agentbus_redis.workers.tools.workspace import Workspace

COMMANDS = ("true", "echo hello; ls -la", "seq 1 20000 | sort -n | tail -1")


async def one_call(tool: BashTool, command: str, ctx: ToolContext | None = None) -> float:
    parsed = tool.input_model.model_validate({"command": command})
    started = time.perf_counter()
    events = [event async for event in tool.call(parsed, ctx or ToolContext(tool_use_id="toolu_bench"))]
    elapsed = time.perf_counter() - started
    output = events[-1]
    assert isinstance(output, ToolOutput)
    assert not output.is_error, output.content
    return elapsed


async def measure(calls: int) -> None:
    sandbox = Sandbox.for_this_process()
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory) / "ws"
        root.mkdir()
        if sandbox.owner is not None:
            os.chown(root, *sandbox.owner)
        deployment = NetworkPolicy.build(["pypi.org", "*.pythonhosted.org"])
        proxy = DomainProxy(deployment, Path(directory) / "proxy" / "proxy.sock")
        await proxy.start()
        bridged_sandbox = sandbox.with_proxy(proxy)
        workspace = Workspace.at(root)
        tools = {
            "unsandboxed": BashTool(workspace),
            "sandboxed": BashTool(workspace, sandbox=sandbox),
            "bridged": BashTool(workspace, sandbox=bridged_sandbox),
            "narrowed": BashTool(workspace, sandbox=bridged_sandbox),
        }
        session = ToolContext(tool_use_id="toolu_bench", sandbox_network=deployment.narrowed(["pypi.org"]))
        contexts = {"narrowed": session}
        version = await sandbox.check(root)
        await bridged_sandbox.check(root)
        print(f"{version} ({sandbox.bwrap}); commands run as {sandbox.owner or 'the worker user'}; {calls} calls each")
        print("bridged: sandboxed with a domain allow-list (the network bridge started before each command)")
        for command in COMMANDS:
            for name, tool in tools.items():  # warm up
                await one_call(tool, command, contexts.get(name))
            times: dict[str, list[float]] = {name: [] for name in tools}
            for _ in range(calls):
                for name, tool in tools.items():
                    times[name].append(await one_call(tool, command, contexts.get(name)))
            median = {name: statistics.median(values) * 1000 for name, values in times.items()}
            p90 = {name: statistics.quantiles(values, n=10)[-1] * 1000 for name, values in times.items()}
            print(
                f"{command!r:40} unsandboxed {median['unsandboxed']:7.2f} ms (p90 {p90['unsandboxed']:6.2f})  "
                f"sandboxed {median['sandboxed']:7.2f} ms (p90 {p90['sandboxed']:6.2f})  "
                f"ratio {median['sandboxed'] / median['unsandboxed']:5.2f}x  "
                f"added {median['sandboxed'] - median['unsandboxed']:6.2f} ms"
            )
            print(
                f"{'':40} bridged   {median['bridged']:7.2f} ms (p90 {p90['bridged']:6.2f})  "
                f"ratio to sandboxed {median['bridged'] / median['sandboxed']:5.2f}x  "
                f"added {median['bridged'] - median['sandboxed']:6.2f} ms"
            )
            print(
                f"{'':40} narrowed  {median['narrowed']:7.2f} ms (p90 {p90['narrowed']:6.2f})  "
                f"ratio to bridged   {median['narrowed'] / median['bridged']:5.2f}x  "
                f"added {median['narrowed'] - median['bridged']:6.2f} ms"
            )
        await proxy.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=100, help="calls of each command, each way")
    args = parser.parse_args()
    uvloop.run(measure(args.calls))


if __name__ == "__main__":
    main()
