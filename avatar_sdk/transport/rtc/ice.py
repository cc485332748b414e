"""Peer-connection plumbing shared by both channels (and the staging backend): ICE servers
(PROTOCOL.md §1.4), applying a remote answer, and closing a peer without leaking sockets.

Why :func:`set_local_description` and :func:`close_peer` exist: aioice binds one UDP socket
per host address while it gathers and registers them on its connection only once all are
bound. A peer closed during ``setLocalDescription`` (a session closed while connecting, a
conversation that ended while the staging server answered) closed a connection that had no
socket yet, and the sockets bound afterwards stayed open; a caller cancelled there dropped
the sockets already bound on the floor. Either way a ``ResourceWarning: unclosed socket``
surfaced much later, in whatever code the garbage collector happened to interrupt.

The same guard covers a close that lands as ICE completes: aioice's ``close()`` stops the
consent checks only if they have started, and ``connect()``, resumed after that close,
starts them on the closed connection, where they loop every ~5 s for ever (a task leaked
per peer, seen in the chaos soak). A connection closed while ``connect()`` was in flight
has them stopped as soon as ``connect()`` returns. Private aiortc 1.16 / aioice 0.13
attributes: both are pinned exactly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, Literal

from aiortc import RTCConfiguration, RTCIceServer, RTCPeerConnection, RTCSessionDescription
from aiortc.rtcconfiguration import RTCBundlePolicy, RTCIceTransportPolicy

from ...besteffort import best_effort
from ...errors import AvatarError, ErrorCode
from ...logs import sdk_logger

log = sdk_logger(__name__)

#: Attribute of a guarded aioice connection holding its gathering task.
_GATHERING: Final = "_avatar_sdk_gathering"
#: Attribute set on an aioice connection whose ``connect()`` is guarded.
_CONNECT_GUARDED: Final = "_avatar_sdk_connect_guarded"
#: Shortest time given to a step of :func:`close_peer` once its budget is spent (s).
_MIN_STEP: Final = 0.05


@dataclass(frozen=True, slots=True)
class TurnConfig:
    """A TURN host and credentials (ephemeral RFC 7635 credentials are just a pair too).

    ``transport``: how to reach the relay. aiortc allocates on the *first* TURN URL only
    (no fallback to the others), so ``"udp"`` (the default) never reaches a relay on a
    network that blocks all UDP: there, ``"tcp"`` puts the TCP URL first (the media then
    goes client to relay over TCP, relay to media server over UDP)."""

    host: str
    username: str
    credential: str
    transport: Literal["udp", "tcp"] = "udp"

    def __post_init__(self) -> None:
        if self.transport not in ("udp", "tcp"):
            raise ValueError(f"transport must be 'udp' or 'tcp', not {self.transport!r}")

    def urls(self) -> list[str]:
        """Every URL with an explicit port and transport: a bare ``turn:host`` yields no
        relay candidate, and the uplink then silently sends nothing. The chosen
        ``transport``'s URL comes first (aiortc uses that one)."""
        host = self.host.strip().rstrip("/")
        for prefix in ("turns:", "turn:"):
            if host.startswith(prefix):
                host = host[len(prefix) :]
        udp = [f"turn:{host}:80?transport=udp", f"turn:{host}:443?transport=udp"]
        tcp = [f"turn:{host}:80?transport=tcp", f"turns:{host}:443?transport=tcp"]
        return tcp + udp if self.transport == "tcp" else udp + tcp


def rtc_configuration(turn: TurnConfig | None, *, relay_only: bool = False) -> RTCConfiguration:
    """The peer configuration for one channel."""
    servers = []
    if turn is not None and turn.host.strip():
        servers.append(
            RTCIceServer(turn.urls(), username=turn.username, credential=turn.credential)
        )
    policy = RTCIceTransportPolicy.RELAY if relay_only and servers else RTCIceTransportPolicy.ALL
    return RTCConfiguration(
        iceServers=servers, iceTransportPolicy=policy, bundlePolicy=RTCBundlePolicy.MAX_BUNDLE
    )


async def apply_answer(pc: RTCPeerConnection, sdp: str, code: ErrorCode, what: str) -> None:
    """Apply a server's answer SDP; an unusable one is ``AvatarError(code)``, not a crash."""
    try:
        await pc.setRemoteDescription(RTCSessionDescription(sdp=sdp, type="answer"))
    except (ValueError, AttributeError) as exc:
        raise AvatarError(code, f"bad {what} ({type(exc).__name__})") from None


# ---------------------------------------------------------------------------------------------
# Gathering that cannot leak, and a close that leaves no socket behind
# ---------------------------------------------------------------------------------------------


def ice_connections(pc: RTCPeerConnection) -> list[Any]:
    """The aioice connections behind ``pc``'s ICE transports (gatherer's and transport's:
    an ICE restart may have swapped one of them)."""
    transports = []
    for transceiver in pc.getTransceivers():
        for dtls in (transceiver.receiver.transport, transceiver.sender.transport):
            if dtls is not None:
                transports.append(dtls.transport)
    if pc.sctp is not None:
        transports.append(pc.sctp.transport.transport)
    found: dict[int, Any] = {}
    for ice in transports:
        for connection in (ice.iceGatherer._connection, ice._connection):
            found.setdefault(id(connection), connection)
    return list(found.values())


def guard_connection(connection: Any) -> None:
    """Make an aioice connection safe to close at any moment (idempotent): its gathering
    (:func:`_guard_gathering`) and its ``connect()`` (:func:`_guard_connect`)."""
    _guard_gathering(connection)
    _guard_connect(connection)


def _guard_gathering(connection: Any) -> None:
    """Make ``connection.gather_candidates()`` safe to interrupt (idempotent).

    The gathering runs in a task of its own that a cancelled caller does not stop (so no
    bound socket is dropped half-way), and when it ends on a connection closed meanwhile it
    closes the connection again, which closes the sockets bound after the first close.
    """
    if hasattr(connection, _GATHERING):
        return
    original: Callable[[], Awaitable[None]] = connection.gather_candidates
    setattr(connection, _GATHERING, None)

    async def gather_candidates() -> None:
        task: asyncio.Task[None] | None = getattr(connection, _GATHERING)
        if task is None:
            task = asyncio.ensure_future(_gather_then_tidy(connection, original))
            task.add_done_callback(_retrieve)
            setattr(connection, _GATHERING, task)
        await asyncio.shield(task)

    connection.gather_candidates = gather_candidates


def _guard_connect(connection: Any) -> None:
    """Make ``connection.connect()`` leave no consent checks on a connection closed while
    it ran (idempotent): aioice starts them after its checks complete even when ``close()``
    came in between, and nothing would ever stop them."""
    if getattr(connection, _CONNECT_GUARDED, False):
        return
    original: Callable[[], Awaitable[None]] = connection.connect
    setattr(connection, _CONNECT_GUARDED, True)

    async def connect() -> None:
        await original()
        if connection._closing:
            consent: asyncio.Task[None] | None = connection._query_consent_task
            connection._query_consent_task = None
            if consent is not None and not consent.done():
                log.debug("stopping the consent checks of an ICE connection closed meanwhile")
                consent.cancel()
                await asyncio.gather(consent, return_exceptions=True)

    connection.connect = connect


async def _gather_then_tidy(connection: Any, gather: Callable[[], Awaitable[None]]) -> None:
    try:
        await gather()
    finally:
        if connection._closing and connection._protocols:
            with best_effort("closing the sockets gathered after close", log):
                await connection.close()


def _retrieve(task: asyncio.Task[None]) -> None:
    # The caller may be gone (cancelled): a failed gathering must not become
    # "Task exception was never retrieved".
    if not task.cancelled() and task.exception() is not None:
        log.debug("ICE gathering failed: %r", task.exception())


async def set_local_description(pc: RTCPeerConnection, description: RTCSessionDescription) -> None:
    """``pc.setLocalDescription(description)`` with the gathering it runs and the connect
    that follows guarded (:func:`guard_connection`). Use it instead of the bare call on every
    peer we close."""
    for connection in ice_connections(pc):
        guard_connection(connection)
    await pc.setLocalDescription(description)


async def close_ice_connection(connection: Any, timeout: float) -> None:
    """Close one aioice connection within ``timeout`` seconds (a gathering still running is
    waited for first, so its sockets are closed too)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(0.0, timeout)
    gathering: asyncio.Task[None] | None = getattr(connection, _GATHERING, None)
    if gathering is not None and not gathering.done():
        await asyncio.wait({gathering}, timeout=max(_MIN_STEP, deadline - loop.time()))
    with best_effort("closing an ICE connection", log):
        async with asyncio.timeout(max(_MIN_STEP, deadline - loop.time())):
            await connection.close()
    _drop_sockets(connection)


def _drop_sockets(connection: Any) -> None:
    """Close every socket ``connection`` still holds, without waiting: aioice's ``close()``
    closes them one at a time and awaits each one's ``connection_lost``, so a close cut
    short by its deadline (a loaded loop) left the later ones open. A transport's
    ``close()`` is synchronous; the socket goes on the loop's next turn."""
    for protocol in list(connection._protocols):
        transport = getattr(protocol, "transport", None)
        if transport is None:
            continue
        is_closing = getattr(transport, "is_closing", None)  # aioice's TURN transport has none
        if is_closing is not None and is_closing():
            continue
        with best_effort("closing an ICE socket", log):
            log.debug("closing an ICE socket its connection's close did not reach")
            transport.close()  # a TURN transport's close is idempotent: it releases the relay


async def close_peer(pc: RTCPeerConnection, timeout: float) -> None:
    """Close ``pc`` within ``timeout`` seconds (plus at most ~0.1 s) and leave none of its
    UDP sockets open. Never raises (except ``CancelledError``).

    ``pc.close()`` alone may leave sockets: a gathering still running binds them after it
    (waited for here, and closed by the guard), and a close cut short by the deadline never
    reaches the ICE connections (closed here directly).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(0.0, timeout)
    connections = ice_connections(pc)
    with best_effort("closing a peer connection", log):  # a timeout included
        async with asyncio.timeout(max(_MIN_STEP, timeout)):
            await pc.close()
    gathering = {
        task
        for connection in connections
        if (task := getattr(connection, _GATHERING, None)) is not None and not task.done()
    }
    if gathering:
        await asyncio.wait(gathering, timeout=max(_MIN_STEP, deadline - loop.time()))
    for connection in connections:
        if connection._protocols:
            await close_ice_connection(connection, deadline - loop.time())
