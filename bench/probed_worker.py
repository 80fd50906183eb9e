"""Run ``agentbus worker model`` with timing probes on its hot path, for ``bench/model_worker.py --breakdown``.

    python bench/probed_worker.py MARKS.txt worker model [--port N]

Each probe appends ``<unix time> <mark> <session> <process CPU time>`` to MARKS.txt when a call of the worker
reaches it (a request's first pass only; the file is line-buffered, a few µs a mark), and every GC pause over
1 ms is noted (``gc``) so a slow call can be told apart from a collection. The probes wrap the worker's own
methods and change nothing they do:

- ``handler``: the notice consumer handed the notice to the worker (``ModelWorker.handle``);
- ``job``: the call's slot task runs (``ModelWorker._run``);
- ``state``: the lease is taken and the session's state read (``ModelWorker._read_state``, one round trip);
- ``built``: the request is built (catalog, session config, ``build_model_params``, limits) (``ModelWorker._call``);
- ``sent``: the token bucket allowed the call and the HTTP request goes out (``ModelCall._create``);
- ``headers``: the response's headers are in (``_create`` returned);
- ``event``: the first stream event is parsed (``SessionPublisher.add_event`` of event 0);
- ``write``: the first write (the event and the in-flight record) goes to Redis; ``written``: its reply is in;
  ``parsed``: how many events the call had parsed by then (1 when nothing holds the first write back).
"""

from __future__ import annotations

import gc
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def install(out: TextIO) -> None:
    from agentbus_redis.workers.model import call, publisher, worker

    def mark(name: str, session: str) -> None:
        out.write(f"{time.time():.6f} {name} {session} {time.process_time():.6f}\n")

    def around(owner: type, method: str, before: str | None, after: str | None, session: Callable[..., str]) -> None:
        original = getattr(owner, method)

        async def probed(self: Any, *args: Any, **kwargs: Any) -> Any:
            if before:
                mark(before, session(self, *args))
            result = await original(self, *args, **kwargs)
            if after:
                mark(after, session(self, *args))
            return result

        setattr(owner, method, probed)

    around(worker.ModelWorker, "handle", "handler", None, lambda _, entries: "-")
    around(worker.ModelWorker, "_run", "job", None, lambda _, entry, notice: notice.session_id)
    around(worker.ModelWorker, "_read_state", None, "state", lambda _, session, lease: session)
    around(worker.ModelWorker, "_call", "built", None, lambda _, session, *rest: session)
    around(call.ModelCall, "_create", "sent", "headers", lambda self, *rest: self.publisher.session_id)

    add_event = publisher.SessionPublisher.add_event

    def probed_add_event(self: Any, request_id: str, index: int, *args: Any, **kwargs: Any) -> None:
        if index == 0:
            mark("event", self.session_id)
        self._probe_events = getattr(self, "_probe_events", 0) + 1
        add_event(self, request_id, index, *args, **kwargs)

    publisher.SessionPublisher.add_event = probed_add_event  # type: ignore[method-assign]
    write_once = publisher.SessionPublisher._write_once

    async def probed_write_once(self: Any, calls: Any) -> None:
        first = not getattr(self, "_probed", False)
        self._probed = True
        if first:
            mark("write", self.session_id)
            out.write(f"{time.time():.6f} parsed {self.session_id} {getattr(self, '_probe_events', 0)}\n")
        await write_once(self, calls)
        if first:
            mark("written", self.session_id)

    publisher.SessionPublisher._write_once = probed_write_once  # type: ignore[method-assign]

    started: list[float] = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        elif (pause := time.perf_counter() - started[0]) > 0.001:
            out.write(f"{time.time():.6f} gc gen{info['generation']} {pause * 1000:.2f}\n")

    gc.callbacks.append(on_gc)


def main() -> None:
    marks, arguments = sys.argv[1], sys.argv[2:]
    sys.argv = ["agentbus", *arguments]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with Path(marks).open("a", buffering=1) as out:
        install(out)
        from agentbus_redis.cli.main import main as agentbus

        agentbus()


if __name__ == "__main__":
    main()
