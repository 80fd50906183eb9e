"""Run one worker under cProfile and write the profile when it stops (``BENCH_PROFILE=1``).

    python bench/profiled_worker.py OUT.prof worker NAME [--port N]

``python -m cProfile -o`` writes nothing for a worker: uvicorn re-raises SIGTERM after its graceful
shutdown, which kills the interpreter before cProfile's exit hook runs. Here SIGTERM becomes
``SystemExit`` (uvicorn restores this handler before re-raising), so the profile is dumped.
"""

from __future__ import annotations

import cProfile
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    out, arguments = sys.argv[1], sys.argv[2:]
    sys.argv = ["agentbus", *arguments]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    from agentbus_redis.cli.main import main as agentbus

    profile = cProfile.Profile()
    profile.enable()
    try:
        agentbus()
    except SystemExit:
        pass
    finally:
        profile.disable()
        profile.dump_stats(out)


if __name__ == "__main__":
    main()
