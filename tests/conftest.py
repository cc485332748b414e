"""Suite-wide settings and helpers: thread leases live in a private directory for this test
run, so concurrent runs on one machine never see each other's conversations; ``until`` is
the bounded wait tests use instead of sleeping."""

from __future__ import annotations

import asyncio
import inspect
import os
import signal
import tempfile
import time
from collections.abc import Awaitable, Callable

# A suite started with SIGINT ignored (a background job of a non-interactive shell, some CI
# runners) hands that to every child process, and the tests that stop a CLI child with
# Ctrl-C (`staging serve`, `talk`) then wait forever: a caught signal is reset to its
# default across exec, an ignored one stays ignored. Seen on fresh clones run as
# `(make test &)`; `bash -c 'trap "" INT; pytest ...'` reproduces it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Strict state machine: firing an undeclared transition raises instead of logging (a bug).
os.environ.setdefault("AVATAR_SDK_STRICT_MACHINE", "1")
os.environ.setdefault("AVATAR_SDK_LEASE_DIR", tempfile.mkdtemp(prefix="avatar-sdk-test-leases-"))


async def until(
    predicate: Callable[[], bool | Awaitable[bool]], timeout: float, step: float = 0.02
) -> bool:
    """Poll ``predicate`` (sync or async) until it holds or ``timeout`` seconds pass;
    returns its last value.

    The bounded wait for a state that has no event of its own (a server-side counter, a
    peer's state): it returns as soon as the state is reached, never sleeps a fixed time.
    Use it as ``assert await until(...)``."""

    async def holds() -> bool:
        value = predicate()
        return bool(await value) if inspect.isawaitable(value) else bool(value)

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await holds():
            return True
        await asyncio.sleep(step)
    return await holds()
