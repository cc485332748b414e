"""Media side of the staging backend: real aiortc peers over loopback (PROTOCOL.md §1.2-1.5).

* **ASR uplink** (one :class:`AsrPeer` per Socket.IO sid): ``asr-webrtc-init`` →
  ``asr-webrtc-ready``; ``asr-webrtc-offer`` → a receive-only aiortc answerer whose answer
  (candidates inside, aiortc does not trickle) goes out as ``asr-webrtc-answer`` through
  :meth:`Conversation.emit`, so latency, withholding and the recovery buffer apply.
  Decoded audio is counted and its energy measured (:meth:`StagingMedia.asr_stats`); aiortc
  sends RTCP receiver reports on its own. A re-offer with ``is_reconnect: true`` is applied
  to the same peer when it can be: same DTLS fingerprint and ICE ufrag → plain
  renegotiation; same fingerprint, new ufrag → an ICE restart (a new aioice connection
  swapped under the live DTLS session, see RECOVERY-NOTES); anything else (a new client
  peer, a closed server peer) → a fresh peer, the old one closed.
* **STV downlink**: ``POST /rtc/v1/whep/?app=app&stream=<session_id>`` with an SDP offer →
  ``201`` + answer + ``Location: /rtc/v1/whep/resource/<id>``; ``DELETE <Location>`` ends
  it. The answerer sends a synthetic moving pattern (H264 when offered and libx264 is
  available, else whatever the offer allows, VP8 in aiortc) and a 48 kHz tone while the
  conversation's avatar is speaking (silence otherwise).
* **Faults** (driven through :class:`~avatar_sdk.testing.faults.Faults`): ICE failure,
  media stall, WHEP 404, stuck ICE (no answer / no candidates).

Every peer belongs to its conversation: closed when the conversation ends (a disconnect
that is not pending recovery, a recovery window that expires) and on server stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import secrets
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import av
from aiohttp import web
from aioice import Connection
from aiortc import RTCConfiguration, RTCPeerConnection, RTCRtpSender, RTCSessionDescription
from aiortc import sdp as sdp_parser
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from aiortc.rtcicetransport import candidate_to_aioice

from ..wire.names import In, Out
from .synthetic import MediaGate, PatternTrack, ToneTrack, audio_rms

if TYPE_CHECKING:
    from .server import Conversation, StagingServer

__all__ = ["AsrPeer", "AsrStats", "IcePath", "StagingMedia", "WhepViewer", "strip_candidates"]

log = logging.getLogger(__name__)

CHANNELS = ("asr", "stv")
ICE_FAILURE_MODES = ("close", "blackhole")
STUCK_MODES = ("no_answer", "no_candidates")
WHEP_PATH = "/rtc/v1/whep/"
WHEP_RESOURCE_PATH = "/rtc/v1/whep/resource/"
NO_ACTIVE_SESSION = "NO_ACTIVE_SESSION"

Handler = Callable[["Conversation", dict[str, Any]], Awaitable[None]]


def _rtc_configuration() -> RTCConfiguration:
    # No STUN server: aiortc's default (a public Google server) would be contacted from a
    # loopback test backend, slowing gathering down or failing offline.
    return RTCConfiguration(iceServers=[])


def _check_channel(channel: str) -> None:
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


def _h264_encoder_available() -> bool:
    try:
        av.codec.Codec("libx264", "w")
    except Exception:  # PyAV raises its own errors for a codec missing from the build
        return False
    return True


def _ice_transports(pc: Any) -> list[Any]:
    """Distinct ICE transports of ``pc`` (one with BUNDLE)."""
    seen: dict[int, Any] = {}
    for transceiver in pc.getTransceivers():
        dtls = transceiver.receiver.transport
        if dtls is not None:
            seen.setdefault(id(dtls.transport), dtls.transport)
    return list(seen.values())


def _blackhole(connection: Any) -> None:
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


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


async def _close_pc(pc: Any, timeout: float = 2.0) -> None:
    # pc.close() sends the DTLS close alert, stops ICE and every RTP loop of the peer.
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(pc.close(), timeout)


class IcePath:
    """What aiortc's DTLS transport reads and writes through, for one ICE transport.

    Two jobs: an ICE restart moves the DTLS session to a new aioice connection without
    DTLS noticing (stock aiortc cannot restart ICE: RECOVERY-NOTES), and an ASR media stall
    drops SRTP/SRTCP while DTLS and STUN consent keep the peer ``connected``. Install it
    before DTLS starts (right after ``setRemoteDescription``); either side of a peer can
    use it (the tests drive a client-side ICE restart with it).
    Private aiortc 1.16 / aioice 0.13 attributes: both are pinned exactly.
    """

    def __init__(self, ice: Any, *, blocked: Callable[[], bool], grace: float) -> None:
        self.ice = ice
        self.active: Any = ice._connection
        self._blocked = blocked
        self._grace = grace
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
        with contextlib.suppress(ConnectionError):
            # A dead path drops, as UDP would: aiortc's RTP/RTCP loops end on the exception.
            await self.active.send(data)

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


@dataclass(frozen=True)
class AsrStats:
    """What the server received on one client's ASR uplink (all of its peers together).

    ``energy`` is the mean RMS of the decoded frames, full scale = 1.0 (a 0.3-amplitude
    sine gives about 0.15 after Opus). Times are ``time.monotonic()``. ``peer_state`` and
    ``ice_state`` are the current server peer's ``connectionState`` and
    ``iceConnectionState`` (aiortc reports ``completed``, never ``connected``), ``"none"``
    before any offer.
    """

    frames: int
    energy: float
    last_frame_at: float | None
    peer_state: str
    first_frame_at: float | None = None
    last_rms: float = 0.0
    ice_state: str = "none"
    offers: int = 0
    answers: int = 0
    peers_created: int = 0
    renegotiations: int = 0
    ice_restarts: int = 0
    candidates_added: int = 0
    candidates_rejected: int = 0
    srtp_dropped: int = 0


class AsrPeer:
    """The server side of one client's ASR uplink, keyed by its Socket.IO sid.

    ``pc`` is the current server :class:`aiortc.RTCPeerConnection` (None before the first
    offer); ``last_method`` says how the last offer was applied: ``"fresh"``,
    ``"renegotiate"`` or ``"ice_restart"``.
    """

    MAX_EARLY_CANDIDATES = 64

    def __init__(self, media: StagingMedia, sid: str) -> None:
        self._media = media
        self.sid = sid
        self.pc: Any = None
        self.last_method: str | None = None
        self.closed = False
        self._path: IcePath | None = None
        self._pending: Any = None  # aioice connection of an ICE restart in progress
        self._fingerprints: frozenset[tuple[str, str]] = frozenset()
        self._ufrag: str | None = None
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self._early: list[Any] = []
        self.frames = 0
        self._rms_sum = 0.0
        self.last_rms = 0.0
        self.first_frame_at: float | None = None
        self.last_frame_at: float | None = None
        self.offers = 0
        self.answers = 0
        self.peers_created = 0
        self.renegotiations = 0
        self.ice_restarts = 0
        self.candidates_added = 0
        self.candidates_rejected = 0
        self._dropped_before = 0

    def __repr__(self) -> str:
        state = self.pc.connectionState if self.pc is not None else "none"
        return f"<AsrPeer sid={self.sid} state={state} frames={self.frames}>"

    @property
    def is_open(self) -> bool:
        return self.pc is not None and self.pc.connectionState != "closed"

    def stats(self) -> AsrStats:
        pc = self.pc
        dropped = self._dropped_before + (self._path.dropped if self._path else 0)
        return AsrStats(
            frames=self.frames,
            energy=self._rms_sum / self.frames if self.frames else 0.0,
            last_frame_at=self.last_frame_at,
            peer_state=str(pc.connectionState) if pc is not None else "none",
            first_frame_at=self.first_frame_at,
            last_rms=self.last_rms,
            ice_state=str(pc.iceConnectionState) if pc is not None else "none",
            offers=self.offers,
            answers=self.answers,
            peers_created=self.peers_created,
            renegotiations=self.renegotiations,
            ice_restarts=self.ice_restarts,
            candidates_added=self.candidates_added,
            candidates_rejected=self.candidates_rejected,
            srtp_dropped=dropped,
        )

    # -- offer / answer -----------------------------------------------------------------------
    async def answer(self, offer_sdp: str, *, is_reconnect: bool) -> str:
        """Apply a client offer; return the answer SDP (raises on an unusable offer)."""
        async with self._lock:
            if self.closed:
                raise RuntimeError("the conversation has ended")
            parsed = sdp_parser.SessionDescription.parse(offer_sdp)
            media = next((m for m in parsed.media if m.kind == "audio"), None)
            if media is None:
                raise ValueError("the offer has no audio m-line")
            fingerprints = frozenset(
                (f.algorithm.lower(), f.value.upper())
                for f in (media.dtls.fingerprints if media.dtls else [])
            )
            ufrag = media.ice.usernameFragment if media.ice else None
            answer: str | None = None
            pc = self.pc
            if (
                is_reconnect
                and pc is not None
                and pc.connectionState != "closed"
                and fingerprints == self._fingerprints
            ):
                try:
                    if ufrag != self._ufrag:
                        answer = await self._restart(offer_sdp, media)
                        self.ice_restarts += 1
                        self.last_method = "ice_restart"
                    else:
                        answer = await self._renegotiate(offer_sdp)
                        self.renegotiations += 1
                        self.last_method = "renegotiate"
                except Exception as exc:  # aiortc raises several types; any → fresh peer
                    log.info("ASR re-offer not applicable in place (%r): fresh peer", exc)
                    answer = None
            if answer is None:
                answer = await self._fresh(offer_sdp)
                self.last_method = "fresh"
            self._fingerprints, self._ufrag = fingerprints, ufrag
            await self._flush_early()
            self.answers += 1
            return answer

    async def _fresh(self, offer_sdp: str) -> str:
        await self._drop_pc()
        if self.closed:  # closed meanwhile: close() would never see this peer
            raise RuntimeError("the conversation has ended")
        pc = RTCPeerConnection(_rtc_configuration())
        self.pc = pc
        self.peers_created += 1
        pc.on("track", self._on_track)
        try:
            await pc.setRemoteDescription(RTCSessionDescription(sdp=offer_sdp, type="offer"))
            ice = _ice_transports(pc)[0]
            self._path = IcePath(
                ice, blocked=self._media.asr_stalled, grace=self._media.ice_restart_grace
            )
            await pc.setLocalDescription(await pc.createAnswer())
        except BaseException:
            await self._drop_pc()
            raise
        return self._media.finish_answer("asr", pc)

    async def _renegotiate(self, offer_sdp: str) -> str:
        pc = self.pc
        await pc.setRemoteDescription(RTCSessionDescription(sdp=offer_sdp, type="offer"))
        await pc.setLocalDescription(await pc.createAnswer())
        return self._media.finish_answer("asr", pc)

    async def _restart(self, offer_sdp: str, media: Any) -> str:
        pc, path = self.pc, self._path
        dtls = pc.getTransceivers()[0].receiver.transport
        if path is None or dtls.state != "connected":
            raise RuntimeError(f"no DTLS session to carry over (dtls {dtls.state})")
        new = Connection(ice_controlling=path.active.ice_controlling)
        try:
            await new.gather_candidates()
            new.remote_username = media.ice.usernameFragment
            new.remote_password = media.ice.password
            for candidate in media.ice_candidates:
                await new.add_remote_candidate(candidate_to_aioice(candidate))
            if media.ice_candidates_complete:
                await new.add_remote_candidate(None)
            # The answer's ice-ufrag/pwd and candidates are read from the gatherer.
            path.ice.iceGatherer._connection = new
            self._pending = new
            await pc.setRemoteDescription(RTCSessionDescription(sdp=offer_sdp, type="offer"))
            await pc.setLocalDescription(await pc.createAnswer())
        except BaseException:
            self._pending = None
            path.ice.iceGatherer._connection = path.active
            await new.close()
            raise
        self._spawn(self._connect_and_switch(path, new))
        return self._media.finish_answer("asr", pc)

    async def _connect_and_switch(self, path: IcePath, new: Any) -> None:
        switched = False
        try:
            await new.connect()
            if path is self._path and not self.closed:
                old = path.switch_to(new)
                switched = True
                await old.close()
        except ConnectionError as exc:
            log.info("ASR ICE restart for %s failed: %s", self.sid, exc)
        finally:
            if self._pending is new:
                self._pending = None
            if not switched:
                await new.close()

    # -- trickle -----------------------------------------------------------------------------
    async def add_candidate(self, payload: Any) -> bool:
        """A trickled client candidate; junk is counted and ignored. True when applied."""
        candidate = _parse_candidate(payload)
        if candidate is None:
            if payload not in (None, {}, "") and not _is_end_of_candidates(payload):
                self.candidates_rejected += 1
            return False
        async with self._lock:
            pc = self.pc
            if pc is None or pc.remoteDescription is None:
                if len(self._early) < self.MAX_EARLY_CANDIDATES:
                    self._early.append(candidate)
                return False
            return await self._apply_candidate(candidate)

    async def _apply_candidate(self, candidate: Any) -> bool:
        try:
            if self._pending is not None:
                await self._pending.add_remote_candidate(candidate_to_aioice(candidate))
            else:
                await self.pc.addIceCandidate(candidate)
        except Exception as exc:  # a well-formed line aiortc/aioice still refuses: junk
            log.debug("ASR candidate ignored: %r", exc)
            self.candidates_rejected += 1
            return False
        self.candidates_added += 1
        return True

    async def _flush_early(self) -> None:
        early, self._early = self._early, []
        for candidate in early:
            await self._apply_candidate(candidate)

    # -- audio ---------------------------------------------------------------------------------
    def _on_track(self, track: MediaStreamTrack) -> None:
        if track.kind == "audio":
            self._spawn(self._consume(track))

    async def _consume(self, track: MediaStreamTrack) -> None:
        with contextlib.suppress(MediaStreamError):
            while True:
                frame = await track.recv()
                now = time.monotonic()
                rms = audio_rms(frame) if isinstance(frame, av.AudioFrame) else 0.0
                self.frames += 1
                self._rms_sum += rms
                self.last_rms = rms
                if self.first_frame_at is None:
                    self.first_frame_at = now
                self.last_frame_at = now

    # -- faults and teardown ----------------------------------------------------------------
    async def fail(self, mode: str) -> bool:
        """Kill the current peer's ICE path (see :meth:`StagingMedia.ice_failure`)."""
        pc = self.pc
        if pc is None or pc.connectionState == "closed":
            return False
        if mode == "blackhole":
            _blackhole(self._path.active if self._path else _ice_transports(pc)[0]._connection)
        else:
            await _close_pc(pc)
        return True

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _drop_pc(self) -> None:
        pc, path, pending = self.pc, self._path, self._pending
        self.pc = self._path = self._pending = None
        if path is not None:
            self._dropped_before += path.dropped
        if pending is not None:
            await pending.close()
        if pc is not None:
            await _close_pc(pc)
        if path is not None:
            path.close()

    async def close(self) -> None:
        """Close the peer and every task of this uplink (idempotent)."""
        self.closed = True
        await self._drop_pc()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


def _is_end_of_candidates(payload: Any) -> bool:
    inner = payload.get("candidate") if isinstance(payload, dict) else payload
    if isinstance(inner, dict):
        inner = inner.get("candidate")
    return inner in (None, "")


def _parse_candidate(payload: Any) -> Any:
    """An aiortc RTCIceCandidate from ``{candidate: {candidate, sdpMid, sdpMLineIndex}}``
    (or the flat form ``{candidate: "<line>", sdpMLineIndex}``); None for junk."""
    if not isinstance(payload, dict):
        return None
    inner = payload.get("candidate")
    fields = inner if isinstance(inner, dict) else payload
    line = inner.get("candidate") if isinstance(inner, dict) else inner
    if not isinstance(line, str):
        return None
    line = line.strip()
    for prefix in ("a=", "candidate:"):
        if line.startswith(prefix):
            line = line[len(prefix) :]
    bits = line.split()
    # candidate_from_sdp only asserts the shape: check it here (typ at its place too).
    if len(bits) < 8 or bits[6] != "typ":
        return None
    try:
        candidate = sdp_parser.candidate_from_sdp(line)
    except ValueError:  # a non-numeric component, priority or port
        return None
    mid = fields.get("sdpMid")
    index = fields.get("sdpMLineIndex")
    candidate.sdpMid = mid if isinstance(mid, str) else None
    valid_index = isinstance(index, int) and not isinstance(index, bool)
    candidate.sdpMLineIndex = index if valid_index else 0
    return candidate


@dataclass
class WhepViewer:
    """One WHEP subscription: a server peer sending the synthetic avatar to one client."""

    resource_id: str
    stream: str
    sid: str
    pc: Any
    video: PatternTrack
    audio: ToneTrack
    video_codec: str | None = None
    created_at: float = field(default_factory=time.monotonic)
    deleted: bool = False

    @property
    def location(self) -> str:
        return f"{WHEP_RESOURCE_PATH}{self.resource_id}"

    @property
    def connected(self) -> bool:
        return not self.deleted and self.pc.connectionState == "connected"

    @property
    def is_open(self) -> bool:
        return bool(self.pc.connectionState != "closed")


class StagingMedia:
    """The media side of :class:`~avatar_sdk.testing.StagingServer` (``staging.media``).

    Counters for assertions: ``whep_posts``, ``whep_deletes``, ``whep_statuses`` (status
    of every WHEP POST, in order), ``whep_delete_statuses``, :attr:`frames_sent` (video
    frames handed to the encoders), :meth:`live_viewers`, :meth:`open_peer_count`,
    :meth:`asr_stats`.
    """

    #: How long an ICE path that died is hidden from DTLS, waiting for an ICE restart (s).
    ice_restart_grace = 10.0
    #: Bound on a WHEP POST held by ``stuck_ice("stv", mode="no_answer")`` (s).
    stuck_hold_max = 60.0
    #: A POST finding a connected viewer waits this long for it to go before 409 (s): a
    #: client that closed its peer (DTLS close alert in flight) and re-POSTs at once is
    #: re-subscribing, not a second viewer.
    busy_grace = 0.5

    def __init__(
        self,
        server: StagingServer,
        *,
        video_size: tuple[int, int] = (320, 240),
        video_fps: float = 20.0,
    ) -> None:
        self._server = server
        self.video_size = video_size
        self.video_fps = video_fps
        self.h264_available = _h264_encoder_available()
        self.asr_peers: dict[str, AsrPeer] = {}
        self._ended_asr: dict[str, AsrStats] = {}  # final stats of ended conversations
        self.streams: dict[str, str] = {}  # STV session id -> sid
        self.viewers: dict[str, WhepViewer] = {}  # WHEP resource id -> viewer
        self.whep_posts = 0
        self.whep_deletes = 0
        self.whep_statuses: list[int] = []
        self.whep_delete_statuses: list[int] = []
        self.stv_gate = MediaGate()
        self.stuck: dict[str, str] = {}
        self.whep_404_remaining = 0
        self._asr_stall_until = 0.0
        self._frames_retired = 0
        self._whep_lock = asyncio.Lock()
        self._stopping = False

    # -- wiring -------------------------------------------------------------------------------
    def handlers(self) -> dict[str, Handler]:
        """Socket.IO handlers of the ASR signalling (client → server)."""
        return {
            Out.ASR_WEBRTC_INIT: self._on_asr_init,
            Out.ASR_WEBRTC_OFFER: self._on_asr_offer,
            Out.ASR_WEBRTC_ICE_CANDIDATE: self._on_asr_candidate,
        }

    def add_routes(self, app: web.Application) -> None:
        """The WHEP endpoint."""
        app.router.add_post(WHEP_PATH, self._whep_post)
        app.router.add_post(WHEP_PATH.rstrip("/"), self._whep_post)
        app.router.add_delete(WHEP_RESOURCE_PATH + "{resource_id}", self._whep_delete)

    def register_stream(self, conv: Conversation, session_id: str) -> None:
        """``stvNewSession`` answered ``session_id``: WHEP viewers may now subscribe to it."""
        self.streams[session_id] = conv.sid

    async def close_conversation(self, sid: str) -> None:
        """The conversation ``sid`` ended: close its peers and forget its STV session.

        Viewer resources stay known (closed) until DELETEd, so a client's DELETE racing its
        own disconnect still gets 200.
        """
        peer = self.asr_peers.pop(sid, None)
        closing: list[Awaitable[None]] = []
        if peer is not None:
            closing.append(peer.close())
            self._ended_asr[sid] = peer.stats()
        for stream in [s for s, owner in self.streams.items() if owner == sid]:
            del self.streams[stream]
        closing += [_close_pc(v.pc) for v in self.viewers.values() if v.sid == sid]
        if closing:
            await asyncio.gather(*closing)

    async def stop(self) -> None:
        """Close every peer, release held requests (server shutdown)."""
        self._stopping = True
        peers = list(self.asr_peers.values())
        viewers = list(self.viewers.values())
        self.asr_peers.clear()
        self.streams.clear()
        self.viewers.clear()
        self._frames_retired += sum(v.video.frames_sent for v in viewers)
        await asyncio.gather(*(p.close() for p in peers), *(_close_pc(v.pc) for v in viewers))

    # -- assertions helpers ------------------------------------------------------------------
    def asr_peer(self, sid: str) -> AsrPeer | None:
        """The ASR uplink of ``sid`` (its ``pc`` is the current server peer)."""
        return self.asr_peers.get(sid)

    def asr_stats(self, sid: str) -> AsrStats:
        """What the server received on ``sid``'s uplink: zeros before any offer; after the
        conversation ended, its final numbers (``peer_state`` as it was then)."""
        peer = self.asr_peers.get(sid)
        if peer is not None:
            return peer.stats()
        ended = self._ended_asr.get(sid)
        if ended is not None:
            return ended
        return AsrStats(frames=0, energy=0.0, last_frame_at=None, peer_state="none")

    def live_viewers(self, stream: str | None = None) -> int:
        """Connected WHEP viewers (of ``stream``, or of every stream)."""
        return sum(1 for v in self.viewers.values() if v.connected and stream in (None, v.stream))

    def viewers_of(self, stream: str) -> list[WhepViewer]:
        """Every known viewer resource of ``stream``, oldest first."""
        return [v for v in self.viewers.values() if v.stream == stream]

    @property
    def frames_sent(self) -> int:
        """Video frames produced for every WHEP viewer so far."""
        return self._frames_retired + sum(v.video.frames_sent for v in self.viewers.values())

    def open_peer_count(self) -> int:
        """Server peer connections not closed yet (ASR and WHEP): 0 means no leak."""
        asr = sum(1 for p in self.asr_peers.values() if p.is_open)
        return asr + sum(1 for v in self.viewers.values() if v.is_open)

    # -- faults -------------------------------------------------------------------------------
    def asr_stalled(self) -> bool:
        return time.monotonic() < self._asr_stall_until

    async def ice_failure(self, channel: str, mode: str = "close") -> int:
        """Fail ICE on every open peer of ``channel``; return how many.

        ``mode="close"``: the server side of the peer dies at once (DTLS close alert, ICE
        and RTP stopped); an aiortc client's peer goes ``closed`` immediately (aiortc's
        way of showing a dead transport), so recovery needs a new offer / WHEP POST.
        ``mode="blackhole"``: the path silently drops everything both ways, consent checks
        included; the client notices through missing media or RTCP (or aioice's consent
        expiry after about 30 s), and the ASR server peer accepts an ICE restart.
        """
        _check_channel(channel)
        if mode not in ICE_FAILURE_MODES:
            raise ValueError(f"mode must be one of {ICE_FAILURE_MODES}, not {mode!r}")
        if channel == "asr":
            results = await asyncio.gather(*(p.fail(mode) for p in self.asr_peers.values()))
            return sum(results)
        viewers = [v for v in self.viewers.values() if v.is_open]
        for viewer in viewers:
            if mode == "blackhole":
                for ice in _ice_transports(viewer.pc):
                    _blackhole(ice._connection)
        if mode == "close":
            await asyncio.gather(*(_close_pc(v.pc) for v in viewers))
        return len(viewers)

    def media_stall(self, channel: str, seconds: float | None = None) -> None:
        """RTP stops on ``channel`` while ICE stays up (None: until :meth:`clear_faults`).

        ``stv``: the synthetic tracks block, so no RTP is sent (RTCP goes on).
        ``asr``: the server drops SRTP/SRTCP both ways: no audio is received and no RTCP
        receiver report reaches the client.
        """
        _check_channel(channel)
        if channel == "stv":
            self.stv_gate.stall(seconds)
        else:
            self._asr_stall_until = math.inf if seconds is None else time.monotonic() + seconds

    def whep_404(self, times: int = 1) -> None:
        self.whep_404_remaining += max(0, times)

    def stuck_ice(self, channel: str, mode: str = "no_answer") -> None:
        _check_channel(channel)
        if mode not in STUCK_MODES:
            raise ValueError(f"mode must be one of {STUCK_MODES}, not {mode!r}")
        self.stuck[channel] = mode

    def clear_faults(self) -> None:
        """Back to healthy (held WHEP POSTs whose client still waits are answered)."""
        self.stv_gate.resume()
        self._asr_stall_until = 0.0
        self.stuck.clear()
        self.whep_404_remaining = 0

    def finish_answer(self, channel: str, pc: Any) -> str:
        """The answer SDP to send, with ``stuck_ice(..., "no_candidates")`` applied."""
        answer = str(pc.localDescription.sdp)
        if self.stuck.get(channel) != "no_candidates":
            return answer
        # Stuck for real: no candidate in the answer, and a server that never answers the
        # client's checks (else the client would still connect through peer-reflexive ones).
        for ice in _ice_transports(pc):
            _blackhole(ice._connection)
        return strip_candidates(answer)

    # -- ASR signalling ----------------------------------------------------------------------
    def _peer(self, sid: str) -> AsrPeer:
        peer = self.asr_peers.get(sid)
        if peer is None:
            peer = self.asr_peers[sid] = AsrPeer(self, sid)
        return peer

    async def _on_asr_init(self, conv: Conversation, data: dict[str, Any]) -> None:
        if conv.ended:
            return
        # The real server ignores the payload's sessionId and keys on the socket id.
        self._peer(conv.sid)
        await conv.emit(In.ASR_WEBRTC_READY, {})

    async def _on_asr_offer(self, conv: Conversation, data: dict[str, Any]) -> None:
        if conv.ended:
            return
        offer = data.get("offer")
        if not isinstance(offer, dict):
            offer = {}
        sdp = offer.get("sdp")
        if not isinstance(sdp, str) or not sdp.strip() or offer.get("type", "offer") != "offer":
            await conv.emit(In.ASR_WEBRTC_ERROR, {"error": "invalid offer"})
            return
        peer = self._peer(conv.sid)
        peer.offers += 1
        if self.stuck.get("asr") == "no_answer":
            return  # stuck ICE: the offer is never answered
        try:
            answer = await peer.answer(sdp, is_reconnect=data.get("is_reconnect") is True)
        except Exception as exc:  # junk SDP from the network must never kill the server
            log.info("ASR offer from %s refused: %r", conv.sid, exc)
            await conv.emit(In.ASR_WEBRTC_ERROR, {"error": f"offer refused: {exc}"})
            return
        if conv.ended or peer.closed:  # the conversation ended while the answer was built
            if self.asr_peers.get(conv.sid) is peer:
                del self.asr_peers[conv.sid]
            await peer.close()
            return
        await conv.emit(In.ASR_WEBRTC_ANSWER, {"answer": {"type": "answer", "sdp": answer}})

    async def _on_asr_candidate(self, conv: Conversation, data: dict[str, Any]) -> None:
        if not conv.ended:
            await self._peer(conv.sid).add_candidate(data)

    # -- WHEP ----------------------------------------------------------------------------------
    def _whep_reply(self, status: int, text: str) -> web.Response:
        self.whep_statuses.append(status)
        return web.Response(status=status, text=text)

    async def _whep_post(self, request: web.Request) -> web.Response:
        self.whep_posts += 1
        if request.content_type != "application/sdp":
            return self._whep_reply(415, "Unsupported Media Type: use application/sdp")
        if self.whep_404_remaining > 0:
            self.whep_404_remaining -= 1
            return self._whep_reply(404, NO_ACTIVE_SESSION)
        stream = request.query.get("stream", "")
        conv = self._stream_conversation(stream)
        if conv is None:
            return self._whep_reply(404, NO_ACTIVE_SESSION)
        if not await self._viewer_gone(stream):
            return self._whep_reply(409, "the stream already has a viewer")
        offer = await request.text()
        if self.stuck.get("stv") == "no_answer" and not await self._hold(request):
            return self._whep_reply(504, "no answer")
        async with self._whep_lock:
            conv = self._stream_conversation(stream)
            if conv is None or self._stopping:
                return self._whep_reply(404, NO_ACTIVE_SESSION)
            if self.live_viewers(stream):
                return self._whep_reply(409, "the stream already has a viewer")
            for stale in self.viewers_of(stream):
                if stale.is_open:  # never connected (a client that gave up): replaced
                    await _close_pc(stale.pc)
            try:
                viewer = await self._new_viewer(conv, stream, offer)
            except Exception as exc:  # an offer aiortc cannot answer (bad SDP, no codec)
                log.info("WHEP offer for %s refused: %r", stream, exc)
                return self._whep_reply(400, f"bad offer: {exc}")
            answer = self.finish_answer("stv", viewer.pc)
        self.whep_statuses.append(201)
        return web.Response(
            status=201,
            body=answer.encode(),
            content_type="application/sdp",
            headers={"Location": viewer.location},
        )

    async def _viewer_gone(self, stream: str) -> bool:
        deadline = time.monotonic() + self.busy_grace
        while self.live_viewers(stream):
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    def _stream_conversation(self, stream: str) -> Conversation | None:
        sid = self.streams.get(stream)
        conv = self._server.conversations.get(sid) if sid is not None else None
        return conv if conv is not None and not conv.ended else None

    async def _hold(self, request: web.Request) -> bool:
        """Sit on a WHEP POST (stuck ICE, no answer). True: released while the client still
        waits; False: the client gave up, the server stops, or the bound ran out."""
        deadline = time.monotonic() + self.stuck_hold_max
        while time.monotonic() < deadline and not self._stopping:
            transport = request.transport
            if transport is None or transport.is_closing():
                return False
            if self.stuck.get("stv") != "no_answer":
                return True
            await asyncio.sleep(0.05)
        return False

    async def _new_viewer(self, conv: Conversation, stream: str, offer: str) -> WhepViewer:
        parsed = sdp_parser.SessionDescription.parse(offer)
        if not any(m.kind in ("video", "audio") for m in parsed.media):
            raise ValueError("the offer has no audio or video m-line")
        width, height = self.video_size
        video = PatternTrack(width=width, height=height, fps=self.video_fps, gate=self.stv_gate)
        audio = ToneTrack(active=lambda: conv.speaking and not conv.ended, gate=self.stv_gate)
        pc = RTCPeerConnection(_rtc_configuration())
        viewer = WhepViewer(secrets.token_hex(8), stream, conv.sid, pc, video, audio)
        try:
            # Transceivers in the offer's m-line order, so each one is matched to its line.
            for media in parsed.media:
                if media.kind == "video" and not any(
                    t.kind == "video" for t in pc.getTransceivers()
                ):
                    transceiver = pc.addTransceiver(video, direction="sendonly")
                    preferences = self._video_preferences(media)
                    if preferences:
                        transceiver.setCodecPreferences(preferences)
                elif media.kind == "audio" and not any(
                    t.kind == "audio" for t in pc.getTransceivers()
                ):
                    pc.addTransceiver(audio, direction="sendonly")
            await pc.setRemoteDescription(RTCSessionDescription(sdp=offer, type="offer"))
            await pc.setLocalDescription(await pc.createAnswer())
        except BaseException:
            await _close_pc(pc)
            raise
        if self._stopping or conv.ended:  # ended while answering: nobody would close it
            await _close_pc(pc)
            raise RuntimeError("the conversation has ended")
        answer = sdp_parser.SessionDescription.parse(pc.localDescription.sdp)
        for media in answer.media:
            if media.kind == "video" and media.rtp.codecs:
                viewer.video_codec = media.rtp.codecs[0].mimeType
        self.viewers[viewer.resource_id] = viewer
        return viewer

    def _video_preferences(self, media: Any) -> list[Any]:
        # The real server only encodes H264: prefer it whenever the client offers it.
        if not self.h264_available:
            return []
        if not any(c.mimeType.lower() == "video/h264" for c in media.rtp.codecs):
            return []
        capabilities = RTCRtpSender.getCapabilities("video").codecs
        return [c for c in capabilities if c.mimeType.lower() in ("video/h264", "video/rtx")]

    async def _whep_delete(self, request: web.Request) -> web.Response:
        self.whep_deletes += 1
        viewer = self.viewers.pop(request.match_info["resource_id"], None)
        if viewer is None:
            self.whep_delete_statuses.append(404)
            return web.Response(status=404, text="unknown WHEP resource")
        viewer.deleted = True
        self._frames_retired += viewer.video.frames_sent
        await _close_pc(viewer.pc)
        self.whep_delete_statuses.append(200)
        return web.Response(status=200)
