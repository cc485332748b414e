"""NetworkLab: two network namespaces joined by a veth pair, with real kernel-level faults.

The lab drives the ``ip``, ``tc`` and ``nft`` commands (iproute2 and nftables) rather than a
netlink library such as pyroute2: they are what every Linux administrator reads and types,
so each fault is one command a user can run by hand to see what the lab did (the commands
are logged at debug level), nftables has no well-kept Python binding on PyPI, and the lab
adds no dependency to the SDK. A command takes a few milliseconds; faults are switched far
less often than that.

The server side (the staging backend, :meth:`NetworkLab.staging`) runs in a child process
that enters the server namespace before it opens a socket. The code under test runs in the
client namespace: :meth:`NetworkLab.client` moves the calling thread into it (``setns(2)``
through libc: Linux namespaces are per thread, and Python has no ``os.setns`` before 3.12),
so every socket the event loop opens meanwhile (the SDK opens all of its sockets on the
loop's thread) belongs to the client namespace; :meth:`NetworkLab.client_command` wraps a
command line in ``ip netns exec`` for a whole process (the CLI's ``avatar-sdk netlab``).

Everything the lab makes lives inside its two namespaces; deleting them (on leaving the
``async with``, an error, a cancellation and Ctrl-C included) removes the veth pair, the
addresses, the rules and the qdiscs with them. A lab whose process was killed outright
(SIGKILL) leaves its namespaces behind: the next lab any process opens deletes those of
creators that are no longer alive (their names carry the creator's pid).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import itertools
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from typing import Any, Literal

from ...besteffort import best_effort
from ...errors import AvatarError, ErrorCode
from ...logs import sdk_logger
from ..process import StagingProcess
from .netns import NETNS_DIR, inside_netns
from .relay import TurnRelay
from .rules import (
    CLIENT_IF,
    SERVER_IF,
    Blackhole,
    Direction,
    Fault,
    HostFacts,
    LabAddresses,
    Loss,
    Protocol,
    Reject,
    lab_names,
    missing_requirements,
    owner_pid,
    rate_limit_commands,
    render_ruleset,
    setup_commands,
)

__all__ = ["ActiveFault", "LabUnavailable", "NetworkLab", "leftover_labs", "requirements"]

log = sdk_logger(__name__)

_serials = itertools.count()


class LabUnavailable(AvatarError):
    """The lab cannot run here; the message names what is missing and the fix."""

    def __init__(self, detail: str) -> None:
        super().__init__(ErrorCode.INVALID_STATE, detail)


def _effective_caps() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except OSError:
        pass
    return 0


def host_facts() -> HostFacts:
    return HostFacts(
        platform=sys.platform,
        effective_caps=_effective_caps(),
        tools={tool: shutil.which(tool) is not None for tool in ("ip", "tc", "nft")},
    )


def requirements() -> str | None:
    """Why the lab cannot run on this host (each missing part and its fix), or None."""
    missing = missing_requirements(host_facts())
    if not missing:
        return None
    lines = ["the network lab needs:"]
    lines += [f"  - {req.what}; fix: {req.fix}" for req in missing]
    return "\n".join(lines)


def _netns_names() -> list[str]:
    try:
        return sorted(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        return []


def leftover_labs(pid: int | None = None) -> list[str]:
    """Lab namespaces that exist now (of process ``pid`` only, if given)."""
    names = [n for n in _netns_names() if owner_pid(n) is not None]
    return [n for n in names if pid is None or owner_pid(n) == pid]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ActiveFault:
    """A fault in force; ``await fault.off()`` (or leaving ``async with fault``) ends it."""

    def __init__(self, lab: NetworkLab, key: int, description: str) -> None:
        self._lab = lab
        self._key = key
        self.description = description

    @property
    def on(self) -> bool:
        return self._lab._is_active(self._key)

    async def off(self) -> None:
        await self._lab._remove(self._key)

    async def __aenter__(self) -> ActiveFault:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.off()

    def __repr__(self) -> str:
        return f"<ActiveFault {self.description} on={self.on}>"


class NetworkLab:
    """``async with NetworkLab() as lab:`` a client and a server namespace joined by a veth
    pair (``lab.server_address``, ``lab.client_address``), with faults on demand.

    Typical use (as root)::

        async with NetworkLab() as lab, lab.staging() as staging:
            with lab.client():  # this thread's new sockets: the client namespace
                async with AvatarSession(staging.url, staging.token,
                                         allow_insecure_transport=True) as session:
                    hole = await lab.blackhole(seconds=None)   # all traffic, both ways
                    ...
                    await hole.off()

    ``subnet``: the lab's private IPv4 /24 (the two namespaces reach nothing else, so any
    free private range works; several labs may share one). ``command_timeout``: the bound
    of each ``ip``/``tc``/``nft`` command (s).
    """

    def __init__(self, *, subnet: str = "10.231.0.0/24", command_timeout: float = 10.0) -> None:
        self.addresses = LabAddresses(ipaddress.IPv4Network(subnet))
        self.command_timeout = command_timeout
        self.client_netns, self.server_netns = lab_names(os.getpid(), next(_serials))
        self._generation = 0
        self._faults: dict[int, Fault] = {}
        self._rates: dict[int, tuple[Literal["up", "down"], float]] = {}
        self._keys = itertools.count(1)
        self._open = False
        self._lock = asyncio.Lock()

    # -- facts ------------------------------------------------------------------------------
    @property
    def server_address(self) -> str:
        return self.addresses.server

    @property
    def client_address(self) -> str:
        return self.addresses.client(self._generation)

    @property
    def faults(self) -> list[Fault]:
        """The packet faults in force."""
        return list(self._faults.values())

    def __repr__(self) -> str:
        return (
            f"<NetworkLab client={self.client_netns}@{self.client_address}"
            f" server={self.server_netns}@{self.server_address} open={self._open}>"
        )

    # -- lifecycle --------------------------------------------------------------------------
    async def __aenter__(self) -> NetworkLab:
        problem = requirements()
        if problem is not None:
            raise LabUnavailable(problem)
        await self._reap_stale()
        self._open = True
        try:
            for argv in setup_commands(self.client_netns, self.server_netns, self.addresses):
                await self._run(argv)
            await self._apply_rules()
        except BaseException:
            await self.close()
            raise
        log.debug("network lab open: %r", self)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Delete both namespaces (and with them everything the lab made). Idempotent."""
        self._open = False
        self._faults.clear()
        self._rates.clear()
        for name in (self.client_netns, self.server_netns):
            if name in _netns_names():
                with best_effort(f"delete the lab namespace {name}", log):
                    await self._run(["ip", "netns", "del", name], shielded=True)

    async def _reap_stale(self) -> None:
        for name in leftover_labs():
            pid = owner_pid(name)
            if pid is not None and pid != os.getpid() and not _alive(pid):
                log.info("deleting the namespace %s of a lab whose process is gone", name)
                with best_effort(f"delete the stale lab namespace {name}", log):
                    await self._run(["ip", "netns", "del", name])

    # -- where code runs --------------------------------------------------------------------
    def staging(self, **options: Any) -> StagingProcess:
        """The staging backend in the server namespace, on the server address (a
        :class:`~avatar_sdk.testing.StagingProcess`: ``async with lab.staging() as s``)."""
        options.setdefault("host", self.server_address)
        return StagingProcess(netns=self.server_netns, **options)

    def turn_relay(self, **options: Any) -> TurnRelay:
        """A TURN relay (coturn) in the server namespace, on the server address, port 80
        (``async with lab.turn_relay() as relay:``, then ``AvatarSession(...,
        turn=relay.config())``); ``options``: :class:`TurnRelay` keyword arguments."""
        self._require_open()
        return TurnRelay(self.server_netns, self.server_address, **options)

    def client(self) -> contextlib.AbstractContextManager[None]:
        """``with lab.client():`` the calling thread (an event loop's: the SDK opens its
        sockets there) is in the client namespace until the block ends.

        Keep the block around the whole life of what is tested: a socket stays in the
        namespace it was opened in, but the thread leaves at the block's end, and what it
        opens afterwards (a reconnect's new socket, an address poll) is in the caller's
        namespace. Worker threads keep the namespace they were started in."""
        self._require_open()
        return inside_netns(self.client_netns)

    def server(self) -> contextlib.AbstractContextManager[None]:
        """``with lab.server():`` the calling thread is in the server namespace."""
        self._require_open()
        return inside_netns(self.server_netns)

    def client_command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` as a command line that runs in the client namespace."""
        return ["ip", "netns", "exec", self.client_netns, *argv]

    # -- faults -----------------------------------------------------------------------------
    async def loss(
        self, percent: float, *, direction: Direction = "both", protocol: Protocol = "udp",
        port: int | None = None,
    ) -> ActiveFault:  # fmt: skip
        """Drop each matching packet with probability ``percent`` / 100, independently."""
        fault = Loss(direction=direction, protocol=protocol, port=port, percent=percent)
        return await self._add(fault, f"loss {percent:g}% {protocol} {direction}")

    async def blackhole(
        self, *, direction: Direction = "both", protocol: Protocol = "all",
        port: int | None = None, except_port: int | None = None,
    ) -> ActiveFault:  # fmt: skip
        """Drop every matching packet silently (``port``: the server's port only;
        ``except_port``: every server port of ``protocol`` but that one, e.g. all UDP but
        the TURN relay's)."""
        fault = Blackhole(
            direction=direction, protocol=protocol, port=port, except_port=except_port
        )
        where = f" port {port}" if port is not None else ""
        where += f" except port {except_port}" if except_port is not None else ""
        return await self._add(fault, f"blackhole {protocol}{where} {direction}")

    async def reject(
        self, protocol: Protocol = "tcp", *, direction: Direction = "up",
        port: int | None = None,
    ) -> ActiveFault:  # fmt: skip
        """Refuse every matching packet where it arrives: TCP with a reset, UDP with an ICMP
        port unreachable (``direction="up"``: the server's side refuses the client)."""
        fault = Reject(direction=direction, protocol=protocol, port=port)
        where = f" port {port}" if port is not None else ""
        return await self._add(fault, f"reject {protocol}{where} {direction}")

    async def rate_limit(
        self, kbit: float, *, direction: Literal["up", "down"] = "down"
    ) -> ActiveFault:
        """Limit one direction to ``kbit`` kbit/s (a token bucket on the sending end)."""
        if direction not in ("up", "down"):
            raise ValueError(f"a rate limit is per direction ('up' or 'down'), not {direction!r}")
        async with self._lock:
            self._require_open()
            for key, (other, _) in list(self._rates.items()):
                if other == direction:
                    del self._rates[key]
            await self._run(rate_limit_commands(*self._sender(direction), kbit))
            key = next(self._keys)
            self._rates[key] = (direction, kbit)
        return ActiveFault(self, key, f"rate {kbit:g} kbit/s {direction}")

    async def link_down(self) -> None:
        """The link goes down (both ends: the carrier is gone); :meth:`link_up` restores it."""
        await self._run(["ip", "-n", self.client_netns, "link", "set", CLIENT_IF, "down"])

    async def link_up(self) -> None:
        await self._run(["ip", "-n", self.client_netns, "link", "set", CLIENT_IF, "up"])

    async def flap(self, seconds: float) -> None:
        """The link down for ``seconds``, then up again (up even if cancelled meanwhile)."""
        await self.link_down()
        try:
            await asyncio.sleep(seconds)
        finally:
            await self._run(
                ["ip", "-n", self.client_netns, "link", "set", CLIENT_IF, "up"], shielded=True
            )

    async def change_address(self) -> str:
        """The client's address changes: the old one removed, the next one added (what a NAT
        rebinding or a Wi-Fi to mobile switch looks like to the server). The new address."""
        async with self._lock:
            self._require_open()
            old = self.client_address
            new = self.addresses.client(self._generation + 1)
            ns, cidr = self.client_netns, self.addresses.cidr
            # Removed first: deleting a subnet's primary address deletes its secondaries.
            await self._run(["ip", "-n", ns, "addr", "del", cidr(old), "dev", CLIENT_IF])
            await self._run(["ip", "-n", ns, "addr", "add", cidr(new), "dev", CLIENT_IF])
            self._generation += 1
        log.debug("network lab: client address %s -> %s", old, new)
        return new

    async def clear(self) -> None:
        """Every fault off (the link up, the address kept)."""
        async with self._lock:
            self._require_open()
            self._faults.clear()
            await self._apply_rules()
            for key, (direction, _) in list(self._rates.items()):
                del self._rates[key]
                await self._run(rate_limit_commands(*self._sender(direction), None))
        await self.link_up()

    # -- internals --------------------------------------------------------------------------
    def _require_open(self) -> None:
        if not self._open:
            raise AvatarError(ErrorCode.INVALID_STATE, "the network lab is not open")

    def _is_active(self, key: int) -> bool:
        return key in self._faults or key in self._rates

    def _sender(self, direction: Literal["up", "down"]) -> tuple[str, str]:
        return (self.client_netns, CLIENT_IF) if direction == "up" else (
            self.server_netns, SERVER_IF,
        )  # fmt: skip

    async def _add(self, fault: Fault, description: str) -> ActiveFault:
        async with self._lock:
            self._require_open()
            key = next(self._keys)
            self._faults[key] = fault
            try:
                await self._apply_rules()
            except BaseException:
                del self._faults[key]
                raise
        log.debug("network lab: %s on", description)
        return ActiveFault(self, key, description)

    async def _remove(self, key: int) -> None:
        if not self._open:
            return
        async with self._lock:
            if key in self._faults:
                del self._faults[key]
                await self._apply_rules()
            elif key in self._rates:
                direction, _ = self._rates.pop(key)
                await self._run(rate_limit_commands(*self._sender(direction), None))

    async def _apply_rules(self) -> None:
        faults = list(self._faults.values())
        for side, ns in (("client", self.client_netns), ("server", self.server_netns)):
            script = render_ruleset(faults, side)  # type: ignore[arg-type]
            await self._run(["ip", "netns", "exec", ns, "nft", "-f", "-"], stdin=script)

    async def _run(
        self, argv: Sequence[str], *, stdin: str | None = None, shielded: bool = False
    ) -> None:
        """Run one command to its end (``shielded``: even when the caller is cancelled,
        as a clean-up must); a failure raises :class:`AvatarError` with its stderr."""
        log.debug("network lab: %s", " ".join(argv))
        task = asyncio.ensure_future(asyncio.to_thread(self._run_sync, list(argv), stdin))
        if shielded:
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                await asyncio.wait([task])
                raise
        else:
            await task

    def _run_sync(self, argv: list[str], stdin: str | None) -> None:
        try:
            done = subprocess.run(
                argv,
                input=stdin.encode() if stdin is not None else None,
                capture_output=True,
                timeout=self.command_timeout,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise AvatarError(ErrorCode.INTERNAL, f"{argv[0]} failed: {exc}") from None
        if done.returncode != 0:
            err = done.stderr.decode(errors="replace").strip()
            raise AvatarError(
                ErrorCode.INTERNAL, f"{' '.join(argv)} exited with {done.returncode}: {err}"
            )
