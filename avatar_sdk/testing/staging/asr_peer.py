"""The staging backend's ASR answerer: one receive-only aiortc peer per client sid that
records what audio arrived, and applies re-offers as renegotiation, ICE restart or a fresh
peer (see :mod:`avatar_sdk.testing.staging.media`).

The uplink audio is decoded on the event loop
(:mod:`avatar_sdk.transport.rtc.aiortc_patches.loop_decode`),
not in a decoder thread per peer: a load test's server then pays no thread hand-off per
20 ms frame per session."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

import av
from aioice import Connection
from aiortc import RTCPeerConnection, RTCSessionDescription
from aiortc import sdp as sdp_parser
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from aiortc.rtcicetransport import candidate_to_aioice

from ...logs import sdk_logger
from ...media.levels import frame_rms
from ...transport.rtc.aiortc_patches.loop_decode import decode_audio_on_loop
from ...transport.rtc.ice import close_ice_connection, guard_connection, set_local_description
from .rtc_util import IcePath, blackhole, close_pc, ice_transports, rtc_configuration
from .state import UplinkHost

log = sdk_logger(__name__)


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
    #: The current server peer: when it was created (a fresh offer), and when its first
    #: decoded frame arrived (None: no audio on it yet). "Audio flowing on a new uplink".
    peer_created_at: float | None = None
    peer_first_frame_at: float | None = None
    #: Receiver reports the current peer let through / held back (``asr_report_interval``).
    reports_sent: int = 0
    reports_held: int = 0


class AsrPeer:
    """The server side of one client's ASR uplink, keyed by its Socket.IO sid.

    ``pc`` is the current server :class:`aiortc.RTCPeerConnection` (None before the first
    offer); ``last_method`` says how the last offer was applied: ``"fresh"``,
    ``"renegotiate"`` or ``"ice_restart"``.
    """

    MAX_EARLY_CANDIDATES = 64
    #: Decoded frames whose RMS :meth:`levels_since` keeps (30 s of 20 ms frames).
    LEVEL_HISTORY = 1500

    def __init__(self, media: UplinkHost, sid: str) -> None:
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
        self._levels: deque[float] = deque(maxlen=self.LEVEL_HISTORY)
        self.first_frame_at: float | None = None
        self.last_frame_at: float | None = None
        self.peer_created_at: float | None = None
        self.peer_first_frame_at: float | None = None
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

    def levels_since(self, frame: int) -> list[float]:
        """The RMS of every frame decoded after the first ``frame`` ones (a count from
        :attr:`AsrStats.frames`), oldest first, as far back as :attr:`LEVEL_HISTORY` goes.
        A short sound is found here even when the server decoded it in one burst between
        two looks at ``last_rms``."""
        recent = max(0, min(self.frames - frame, len(self._levels)))
        return list(self._levels)[len(self._levels) - recent :]

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
            peer_created_at=self.peer_created_at,
            peer_first_frame_at=self.peer_first_frame_at,
            reports_sent=self._path.reports_sent if self._path else 0,
            reports_held=self._path.reports_held if self._path else 0,
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
        pc = RTCPeerConnection(rtc_configuration())
        self.pc = pc
        self.peers_created += 1
        self.peer_created_at = time.monotonic()
        self.peer_first_frame_at = None
        pc.on("track", lambda track: self._on_track(track, pc))
        try:
            await pc.setRemoteDescription(RTCSessionDescription(sdp=offer_sdp, type="offer"))
            for transceiver in pc.getTransceivers():
                if transceiver.kind == "audio":
                    decode_audio_on_loop(transceiver.receiver)
            ice = ice_transports(pc)[0]
            self._path = IcePath(
                ice,
                blocked=self._media.asr_stalled,
                grace=self._media.ice_restart_grace,
                reports_every=lambda: self._media.asr_report_interval,
            )
            await set_local_description(pc, await pc.createAnswer())
        except BaseException:
            await self._drop_pc()
            raise
        return self._media.finish_answer("asr", pc)

    async def _renegotiate(self, offer_sdp: str) -> str:
        pc = self.pc
        await pc.setRemoteDescription(RTCSessionDescription(sdp=offer_sdp, type="offer"))
        await set_local_description(pc, await pc.createAnswer())
        return self._media.finish_answer("asr", pc)

    async def _restart(self, offer_sdp: str, media: Any) -> str:
        pc, path = self.pc, self._path
        dtls = pc.getTransceivers()[0].receiver.transport
        if path is None or dtls.state != "connected":
            raise RuntimeError(f"no DTLS session to carry over (dtls {dtls.state})")
        new = Connection(ice_controlling=path.active.ice_controlling)
        guard_connection(new)  # a cancelled or closed restart must leave no socket, no task
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
            await set_local_description(pc, await pc.createAnswer())
        except BaseException:
            self._pending = None
            path.ice.iceGatherer._connection = path.active
            await close_ice_connection(new, 2.0)
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
                await close_ice_connection(old, 2.0)  # every socket closed, even if cut short
        except ConnectionError as exc:
            log.info("ASR ICE restart for %s failed: %s", self.sid, exc)
        finally:
            if self._pending is new:
                self._pending = None
            if not switched:
                await close_ice_connection(new, 2.0)

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
    def _on_track(self, track: MediaStreamTrack, pc: Any) -> None:
        if track.kind == "audio":
            self._spawn(self._consume(track, pc))

    async def _consume(self, track: MediaStreamTrack, pc: Any) -> None:
        with contextlib.suppress(MediaStreamError):
            while True:
                frame = await track.recv()
                now = time.monotonic()
                rms = frame_rms(frame) if isinstance(frame, av.AudioFrame) else 0.0
                self.frames += 1
                self._rms_sum += rms
                self.last_rms = rms
                self._levels.append(rms)
                if self.first_frame_at is None:
                    self.first_frame_at = now
                if pc is self.pc and self.peer_first_frame_at is None:
                    self.peer_first_frame_at = now
                self.last_frame_at = now
                if isinstance(frame, av.AudioFrame) and frame.sample_rate:
                    seconds = frame.samples / frame.sample_rate
                    self._media.on_uplink_frame(self.sid, rms, seconds)

    # -- faults and teardown ----------------------------------------------------------------
    async def fail(self, mode: str) -> bool:
        """Kill the current peer's ICE path (see :meth:`StagingMedia.ice_failure`)."""
        pc = self.pc
        if pc is None or pc.connectionState == "closed":
            return False
        if mode == "blackhole":
            blackhole(self._path.active if self._path else ice_transports(pc)[0]._connection)
        else:
            await close_pc(pc)
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
            await close_pc(pc)
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
