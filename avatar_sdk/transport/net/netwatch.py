"""NetworkWatcher: notices by itself when the host's network changes.

On Linux it listens to the kernel: an ``AF_NETLINK`` (rtnetlink) socket subscribed to link,
address and route changes, read on the event loop (no thread), and judged by
:class:`~.netchange.NetworkState` (only a change that can break or replace a path counts).
Elsewhere, or where netlink is refused, it polls the host's addresses (``ifaddr``) every
``poll_interval`` seconds. A burst of kernel messages (an address removed, its routes with
it, a new address) is reported once, ``settle`` seconds after the last one.

The session's reaction (``SessionConfig.watch_network``, on by default) is what the
reference client does on the browser's ``online`` event: probe the control socket at once
and restart both media channels (``docs/resilience.md``).
"""

from __future__ import annotations

import asyncio
import errno
import socket
import sys
from collections.abc import Callable

import ifaddr

from ...clock import SYSTEM_CLOCK, Clock
from ...logs import sdk_logger
from ..liveness.netchange import (
    DUMPS,
    GROUPS,
    NLMSG_DONE,
    NLMSG_ERROR,
    NetworkState,
    Snapshot,
    diff_snapshots,
    dump_request,
    snapshot_of,
    split_messages,
)

__all__ = ["NetworkWatcher", "host_snapshot"]

log = sdk_logger(__name__)

NETLINK_ROUTE = 0


def host_snapshot() -> Snapshot:
    """The host's addresses now (``ifaddr``: every platform)."""
    pairs: list[tuple[str, str]] = []
    for adapter in ifaddr.get_adapters():
        for ip in adapter.ips:
            text = ip.ip if isinstance(ip.ip, str) else ip.ip[0]
            pairs.append((adapter.name, text))
    return snapshot_of(pairs)


class NetworkWatcher:
    """``await watcher.run()`` (until cancelled) calls ``on_change(description)`` once per
    change of the host's network. ``netlink=False`` forces the polling fallback."""

    def __init__(
        self,
        on_change: Callable[[str], None],
        *,
        clock: Clock | None = None,
        settle: float = 0.2,
        poll_interval: float = 2.0,
        netlink: bool | None = None,
    ) -> None:
        self._on_change = on_change
        self._clock = clock or SYSTEM_CLOCK
        self.settle = settle
        self.poll_interval = poll_interval
        self._netlink = sys.platform.startswith("linux") if netlink is None else netlink
        #: "netlink" or "polling" once running (diagnostics, tests).
        self.mode: str | None = None
        #: Set once the watcher knows the network as it is (changes count from then).
        self.ready = asyncio.Event()
        self._addresses: frozenset[str] | None = None

    def addresses(self) -> frozenset[str] | None:
        """The host's addresses as last seen (loopback and link-local left out), or None
        before the watcher knows them."""
        return self._addresses

    async def run(self) -> None:
        if self._netlink:
            try:
                sock = self._open_netlink()
            except OSError as exc:
                log.info(
                    "no netlink socket (%s: %s): polling the addresses", type(exc).__name__, exc
                )
            else:
                try:
                    with sock:
                        self.mode = "netlink"
                        await self._listen(sock)
                    return
                except OSError as exc:  # the socket failed while listening: poll instead
                    log.warning(
                        "netlink listening failed (%s: %s): polling the addresses",
                        type(exc).__name__,
                        exc,
                    )
        if self.poll_interval <= 0:
            return
        self.mode = "polling"
        await self._poll()

    # -- netlink ----------------------------------------------------------------------------
    @staticmethod
    def _open_netlink() -> socket.socket:
        sock = socket.socket(
            socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_NONBLOCK, NETLINK_ROUTE
        )
        try:
            sock.bind((0, GROUPS))
        except BaseException:
            sock.close()
            raise
        return sock

    async def _listen(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        state = NetworkState()
        # Subscribed first, then the dump: nothing between the two is missed; what the dump
        # repeats is known by then, so it counts once.
        dumps = list(DUMPS)
        await loop.sock_sendall(sock, dump_request(dumps.pop(0)))
        dumping = True
        pending: list[str] = []
        flush: asyncio.TimerHandle | None = None

        def report() -> None:
            nonlocal flush
            flush = None
            what = "; ".join(dict.fromkeys(pending))
            pending.clear()
            self._notify(what)

        try:
            while True:
                try:
                    data = await loop.sock_recv(sock, 65536)
                except OSError as exc:
                    if exc.errno != errno.ENOBUFS:
                        raise
                    # The kernel had more to say than the socket could hold: some messages
                    # are lost, the next ones still count against what is known.
                    log.info("netlink overflow (ENOBUFS): some network messages were lost")
                    continue
                messages = list(split_messages(data))
                changes = state.apply_all(messages)
                self._addresses = frozenset(address for _, address in state.addresses)
                if dumping:
                    if any(m.type in (NLMSG_DONE, NLMSG_ERROR) for m in messages):
                        if dumps:
                            await loop.sock_sendall(sock, dump_request(dumps.pop(0)))
                        else:
                            dumping = False
                            self.ready.set()
                    continue
                if not changes:
                    continue
                pending.extend(changes)
                if flush is not None:
                    flush.cancel()
                flush = loop.call_later(self.settle, report)
        finally:
            if flush is not None:
                flush.cancel()

    # -- polling ----------------------------------------------------------------------------
    async def _poll(self) -> None:
        # On the loop's thread, not a worker's: a network namespace is per thread (the
        # session's sockets are the loop thread's), and the call is a local kernel query
        # (getifaddrs) that takes well under a millisecond.
        last = host_snapshot()
        self._addresses = frozenset(address for _, address in last)
        self.ready.set()
        while True:
            await self._clock.sleep(self.poll_interval)
            now = host_snapshot()
            self._addresses = frozenset(address for _, address in now)
            what = diff_snapshots(last, now)
            last = now
            if what is not None:
                self._notify(what)

    def _notify(self, what: str) -> None:
        log.info("host network changed: %s", what)
        try:
            self._on_change(what)
        except Exception as exc:  # the watcher outlives a bad callback
            log.warning("network change callback failed (%s: %s)", type(exc).__name__, exc)
