"""One host network watcher per event loop, shared by every session on it.

Why: each session used to run its own :class:`~.netwatch.NetworkWatcher`, so a fleet of
1,000 sessions in one process opened 1,000 rtnetlink sockets, each woken by every kernel
message. The host's network is one for the whole process (per thread, strictly: a network
namespace is a thread's, hence one watcher per event loop): one watcher is started with
the first session that subscribes, tells every subscriber of each change, and is closed
with the last. Sessions with another clock or poll interval get a watcher of their own, so
what each session sees is what its own watcher showed it before.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from ...clock import Clock
from ...logs import sdk_logger
from .netwatch import NetworkWatcher

__all__ = ["NETWORK_WATCHERS", "NetworkWatchers"]

log = sdk_logger(__name__)

Listener = Callable[[str], None]


@dataclass(eq=False)
class _Shared:
    watcher: NetworkWatcher
    task: asyncio.Task[None]
    listeners: list[Listener] = field(default_factory=list)


class NetworkWatchers:
    """The shared watchers, reference-counted by their subscribers."""

    def __init__(self) -> None:
        self._shared: dict[tuple[int, int, float], _Shared] = {}

    def __len__(self) -> int:
        """How many watchers run now (all event loops together)."""
        return len(self._shared)

    @contextlib.asynccontextmanager
    async def subscribe(
        self, on_change: Listener, *, clock: Clock, poll_interval: float
    ) -> AsyncIterator[NetworkWatcher]:
        """``on_change(description)`` on every change of the host's network while inside;
        yields the shared watcher (its ``mode``, ``ready``, ``addresses()``). The last
        subscriber to leave stops the watcher and waits for its socket to close."""
        key = (id(asyncio.get_running_loop()), id(clock), poll_interval)
        shared = self._shared.get(key)
        if shared is None:
            listeners: list[Listener] = []
            watcher = NetworkWatcher(
                lambda what: _tell(listeners, what), clock=clock, poll_interval=poll_interval
            )
            task = asyncio.ensure_future(watcher.run())
            task.set_name("avatar-sdk:network-watch")
            shared = self._shared[key] = _Shared(watcher, task, listeners)
        shared.listeners.append(on_change)
        try:
            yield shared.watcher
        finally:
            shared.listeners.remove(on_change)
            if not shared.listeners:
                if self._shared.get(key) is shared:
                    del self._shared[key]  # a newcomer from now on starts a fresh watcher
                shared.task.cancel()
                await asyncio.wait({shared.task})


def _tell(listeners: list[Listener], what: str) -> None:
    """One change to every subscriber; one whose callback fails does not stop the rest."""
    for listener in list(listeners):
        try:
            listener(what)
        except Exception as exc:
            log.warning("network change callback failed (%s: %s)", type(exc).__name__, exc)


#: The process's shared watchers (every session subscribes here).
NETWORK_WATCHERS = NetworkWatchers()
