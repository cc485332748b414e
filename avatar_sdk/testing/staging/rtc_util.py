"""Shared aiortc plumbing of the staging media side: constants, SDP helpers, fault
primitives (black-holing an ICE connection) and :class:`IcePath` for ICE restarts."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import av
from aiortc import RTCConfiguration

from ...logs import sdk_logger
from ...transport.rtc.ice import close_peer

log = sdk_logger(__name__)

CHANNELS = ("asr", "stv")
ICE_FAILURE_MODES = ("close", "blackhole")
STUCK_MODES = ("no_answer", "no_candidates")
WHEP_PATH = "/rtc/v1/whep/"
WHEP_RESOURCE_PATH = "/rtc/v1/whep/resource/"
NO_ACTIVE_SESSION = "NO_ACTIVE_SESSION"


def rtc_configuration() -> RTCConfiguration:
    # No STUN server: aiortc's default (a public Google server) would be contacted from a
    # loopback test backend, slowing gathering down or failing offline.
    return RTCConfiguration(iceServers=[])


def check_channel(channel: str) -> None:
    if channel not in CHANNELS:
        raise ValueError(f"channel must be one of {CHANNELS}, not {channel!r}")


def strip_candidates(sdp: str) -> str:
    """``sdp`` without its ``a=candidate`` and ``a=end-of-candidates`` lines."""
    lines = [
        line
        for line in sdp.splitlines()
        if line and not line.startswith(("a=candidate:", "a=end-of-candidates"))
    ]
    return "\r\n".join(lines) + "\r\n"


def h264_encoder_available() -> bool:
    try:
        av.codec.Codec("libx264", "w")
    except Exception:  # PyAV raises its own errors for a codec missing from the build
        return False
    return True


def ice_transports(pc: Any) -> list[Any]:
    """Distinct ICE transports of ``pc`` (one with BUNDLE)."""
    seen: dict[int, Any] = {}
    for transceiver in pc.getTransceivers():
        dtls = transceiver.receiver.transport
        if dtls is not None:
            seen.setdefault(id(dtls.transport), dtls.transport)
    return list(seen.values())


def blackhole(connection: Any) -> None:
    """A dead network path for one aioice connection: every datagram dropped, both ways,
    STUN included, so neither side hears consent checks or media any more."""

    async def drop_send(data: bytes, addr: Any) -> None:
        return None

    def drop(*args: Any) -> None:
        return None

    for protocol in connection._protocols:
        protocol.datagram_received = drop
        protocol.send_data = drop_send
        protocol.send_stun = drop


def _is_srtp(data: bytes) -> bool:
    # RFC 7983 demultiplexing: 128..191 is RTP/RTCP; DTLS is 20..63, STUN never gets here.
    return bool(data) and 127 < data[0] < 192


#: RTCP packet type of a receiver report (RFC 3550 section 6.4.2); its header stays in
#: the clear in SRTCP.
_RTCP_RR = 201


def _is_receiver_report(data: bytes) -> bool:
    return _is_srtp(data) and len(data) > 1 and data[1] == _RTCP_RR


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


async def close_pc(pc: Any, timeout: float = 2.0) -> None:
    # pc.close() sends the DTLS close alert, stops ICE and every RTP loop of the peer;
    # close_peer also closes the sockets of a gathering still running (or a close cut short).
    await close_peer(pc, timeout)


class IcePath:
    """What aiortc's DTLS transport reads and writes through, for one ICE transport.

    Two jobs: an ICE restart moves the DTLS session to a new aioice connection without
    DTLS noticing (stock aiortc cannot restart ICE: RECOVERY-NOTES), and an ASR media stall
    drops SRTP/SRTCP while DTLS and STUN consent keep the peer ``connected``. Install it
    before DTLS starts (right after ``setRemoteDescription``); either side of a peer can
    use it (the tests drive a client-side ICE restart with it).
    Private aiortc 1.16 / aioice 0.13 attributes: both are pinned exactly.

    ``grace``: how long a path that died is hidden from DTLS, waiting for a restart
    (None: until this path is closed).

    ``reports_every`` (read at each report): the receiver-report cadence of this side.
    None: aiortc's own (one every 0.5-1.5 s); ``S`` seconds: at most one report every ``S``
    (the first one no sooner than ``S`` after this path was set up, as RFC 3550 allows; the
    reports aiortc makes in between are dropped, so they arrive ``S`` to ``S`` + 1.5 s
    apart); ``math.inf``: never (a media server that sends no RTCP at all).
    """

    def __init__(
        self,
        ice: Any,
        *,
        blocked: Callable[[], bool],
        grace: float | None,
        reports_every: Callable[[], float | None] | None = None,
    ) -> None:
        self.ice = ice
        self.active: Any = ice._connection
        self._blocked = blocked
        self._grace = grace
        self._reports_every = reports_every
        self._last_report = time.monotonic()  # "sent" when the path was set up
        self.reports_sent = 0
        self.reports_held = 0
        self._switched: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._get: asyncio.Future[bytes] | None = None
        self._get_conn: Any = None
        self.dropped = 0
        ice._recv = self._recv
        ice._send = self._send

    async def _recv(self) -> bytes:
        while True:
            data = await self._recv_active()
            if self._blocked() and _is_srtp(data):
                self.dropped += 1
                continue
            return data

    async def _recv_active(self) -> bytes:
        while True:
            conn, switched = self.active, self._switched
            if self._get is None or self._get_conn is not conn:
                self._get, self._get_conn = asyncio.ensure_future(conn.recv()), conn
                self._get.add_done_callback(_retrieve)
            get = self._get
            await asyncio.wait({get, switched}, return_when=asyncio.FIRST_COMPLETED)
            if not get.done():
                get.cancel()  # switched to a new connection: read from that one
                self._get = None
                continue
            self._get = None
            try:
                return get.result()
            except ConnectionError:
                if conn is not self.active:
                    continue
                # The path died: hide it from DTLS for a while, an ICE restart may come.
                try:
                    await asyncio.wait_for(asyncio.shield(self._switched), self._grace)
                except TimeoutError:
                    raise ConnectionError("ICE path lost and no ICE restart") from None

    async def _send(self, data: bytes) -> None:
        if self._blocked() and _is_srtp(data):
            self.dropped += 1
            return
        if _is_receiver_report(data):
            if not self._report_due():
                self.reports_held += 1
                return
            self.reports_sent += 1
        with contextlib.suppress(ConnectionError):
            # A dead path drops, as UDP would: aiortc's RTP/RTCP loops end on the exception.
            await self.active.send(data)

    def _report_due(self) -> bool:
        every = self._reports_every() if self._reports_every is not None else None
        if every is None:
            return True
        now = time.monotonic()
        if now < self._last_report + every:
            return False
        self._last_report = now
        return True

    def switch_to(self, new: Any) -> Any:
        """Carry the DTLS session over to ``new`` (connected); return the old connection."""
        old, self.active = self.active, new
        ice = self.ice
        ice._connection = new
        monitor = ice._RTCIceTransport__monitor_task
        if monitor is not None:
            monitor.cancel()
        ice._RTCIceTransport__monitor_task = asyncio.ensure_future(ice._monitor())
        if ice.state == "failed":
            ice._RTCIceTransport__setState("completed")
        done, self._switched = self._switched, asyncio.get_running_loop().create_future()
        done.set_result(None)
        return old

    def close(self) -> None:
        if self._get is not None:
            self._get.cancel()
            self._get = None
        if not self._switched.done():
            self._switched.cancel()
