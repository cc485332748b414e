"""A second process for tests/integration/test_lifecycle_processes.py (not a test module).

``python -m tests.integration._lifecycle_child MODE LEASE_DIR THREAD_ID [EXIT_BOUND]``;
the genie URL and token come from ``AVATAR_TEST_GENIE_URL`` / ``AVATAR_TEST_TOKEN`` (kept
out of argv). Modes:

* ``hold``: hold the thread, print ``READY``, then obey stdin lines: ``complete`` (complete
  the thread, print the payload as JSON), ``release`` (drop the lease, print ``RELEASED``),
  ``exit``.
* ``stale``: hold the thread and die without any cleanup (``os._exit``).
* ``sigterm``: a session-like holder with ``ShutdownHooks.install()`` whose callback
  completes the thread; prints ``READY`` and waits for a signal.
* ``atexit``: hold the thread, track the completion for interpreter exit, print ``READY``
  and return from main without closing anything; prints ``EXITING <monotonic>`` and
  ``EXITED <monotonic>`` around the SDK's exit hook.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import sys
import time

from avatar_sdk.lifecycle.completion import CompletionSignal, ShutdownHooks, ThreadLeases
from avatar_sdk.transport.net.genie import GenieClient

#: Tracked completions stay referenced here until exit (as a live session would).
_KEEP: list[object] = []


def _genie() -> GenieClient | None:
    url = os.environ.get("AVATAR_TEST_GENIE_URL")
    token = os.environ.get("AVATAR_TEST_TOKEN")
    return GenieClient(url, token) if url and token else None


def _say(line: str) -> None:
    print(line, flush=True)


async def _complete(signal: CompletionSignal, reason: str) -> None:
    payload = await signal.complete(reason=reason)
    if signal.genie is not None:
        await signal.genie.close()
    _say(json.dumps(payload))


def hold(leases: ThreadLeases, thread_id: str) -> None:
    signal = CompletionSignal(_genie(), timeout=2.0, leases=leases, thread_id=thread_id)
    signal.hold()
    _say("READY")
    for line in sys.stdin:
        command = line.strip()
        if command == "complete":
            asyncio.run(_complete(signal, "close"))
        elif command == "release":
            signal.lease.release()
            _say("RELEASED")
        elif command == "exit":
            break


async def sigterm(leases: ThreadLeases, thread_id: str) -> None:
    signal = CompletionSignal(_genie(), timeout=2.0, leases=leases, thread_id=thread_id)
    signal.hold()
    hooks = ShutdownHooks(grace=2.0)

    async def close() -> None:
        await _complete(signal, "signal")

    hooks.register(close)
    installed = hooks.install()
    _say(f"READY {','.join(str(s) for s in installed)}")
    await asyncio.Event().wait()


async def at_exit(leases: ThreadLeases, thread_id: str, bound: float) -> None:
    signal = CompletionSignal(_genie(), timeout=5.0, leases=leases, thread_id=thread_id)
    signal.hold()
    # atexit runs last-registered first: EXITING, the SDK's hook, then EXITED.
    atexit.register(lambda: _say(f"EXITED {time.monotonic()}"))
    ShutdownHooks(exit_bound=bound).track(signal)
    atexit.register(lambda: _say(f"EXITING {time.monotonic()}"))
    _say("READY")


def main(argv: list[str]) -> None:
    mode, directory, thread_id = argv[:3]
    leases = ThreadLeases(directory)
    if mode == "hold":
        hold(leases, thread_id)
    elif mode == "stale":
        lease = leases.acquire(thread_id)
        _KEEP.append(lease)
        _say("READY")
        sys.stdout.flush()
        os._exit(0)
    elif mode == "sigterm":
        asyncio.run(sigterm(leases, thread_id))
    elif mode == "atexit":
        asyncio.run(at_exit(leases, thread_id, float(argv[3]) if len(argv) > 3 else 1.0))
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main(sys.argv[1:])
