"""A bare client for the ``load`` figure: the same work as an SDK session, no SDK around it.

What the SDK adds per session (state machine, watchdogs, event bus, uplink wrapper, fan-out
pumps) is the difference between an :class:`~avatar_sdk.AvatarSession` and this: a plain
python-socketio ``AsyncClient`` walking the connect sequence of PROTOCOL.md §2 with the
SDK's pure payload builders (:mod:`avatar_sdk.wire`), an aiortc send-only peer for the ASR
uplink whose SDP is relayed over the socket (§1.2), and a WHEP receive-only peer (§1.3)
with one task per received track reading every frame, as the SDK's pumps do. No
``AvatarSession``, no SDK transport wrapper, no retries, no recovery: a failed step raises.

Hand-written rather than reusing :mod:`avatar_sdk.transport` on purpose: the point is a
baseline that owes nothing to the SDK's plumbing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode, urljoin

import aiohttp
import socketio
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from aiortc.rtcconfiguration import RTCBundlePolicy
from aiortc.sdp import candidate_from_sdp
from socketio import packet as sio_packet

from avatar_sdk.wire import (
    build_approved_permissions,
    build_asr_init,
    build_asr_offer,
    build_check_availability,
    build_join,
    build_stv_new_session,
    new_room_id,
    new_sticky_id,
)

log = logging.getLogger(__name__)

#: Handshake events the connect sequence waits for (first of each name wins).
_WAITED = frozenset(
    {
        "onServerConnected",
        "clientConfiguration",
        "joinComplete",
        "stvNewSession",
        "showAgent",
        "askPermissions",
        "asr-webrtc-ready",
        "asr-webrtc-answer",
    }
)


class BareClient:
    """One session's worth of work: socket, join, ASR uplink, WHEP downlink, approval."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        audio: MediaStreamTrack | None,
        media: bool = True,
        video: bool = False,
        step_timeout: float = 20.0,
    ) -> None:
        self._url = url.rstrip("/")
        self._token = token
        self._audio = audio
        self._media = media
        self._video = video
        self._timeout = step_timeout
        self._sio = socketio.AsyncClient(reconnection=False)
        self._sio.on("*", self._on_event)
        self._events: dict[str, asyncio.Future[Any]] = {}
        self._http: aiohttp.ClientSession | None = None
        self._whep_location: str | None = None
        self.asr: RTCPeerConnection | None = None
        self.stv: RTCPeerConnection | None = None
        self._readers: set[asyncio.Task[None]] = set()
        self._first_frame = asyncio.Event()
        self.frames: dict[str, int] = {"audio": 0, "video": 0}
        #: Told of every decoded frame as it is read (the ``latency`` figure's onset probe).
        self.on_frame: Callable[[str, Any], None] | None = None

    def __repr__(self) -> str:
        return f"<BareClient media={self._media} video={self._video}>"

    # -- socket ---------------------------------------------------------------------------
    def _future(self, name: str) -> asyncio.Future[Any]:
        fut = self._events.get(name)
        if fut is None:
            fut = self._events[name] = asyncio.get_running_loop().create_future()
        return fut

    async def _on_event(self, event: str, *args: Any) -> None:
        # The server appends its recovery offset (a str) after the payload: args[0] is it.
        payload = args[0] if args else None
        if event in _WAITED:
            fut = self._future(event)
            if not fut.done():
                fut.set_result(payload)
        elif event == "asr-ice-candidate" and self.asr is not None and isinstance(payload, dict):
            await self._add_candidate(payload)

    async def _add_candidate(self, payload: dict[str, Any]) -> None:
        text = str(payload.get("candidate") or "").removeprefix("candidate:").strip()
        if not text or self.asr is None:
            return
        try:
            ice = candidate_from_sdp(text)
            ice.sdpMLineIndex = int(payload.get("sdpMLineIndex") or 0)
            await self.asr.addIceCandidate(ice)
        except Exception as exc:  # a junk candidate is ignored, as the reference client does
            log.debug("ignored ASR candidate: %s", type(exc).__name__)

    async def _wait(self, name: str) -> Any:
        return await asyncio.wait_for(asyncio.shield(self._future(name)), self._timeout)

    async def connect(self) -> None:
        """Run the whole connect sequence; the session is usable (approved) on return."""
        query = {
            "partnerId": "",
            "billed_client": "",
            "stickyId": new_sticky_id(),
            "level": "published",
            "debugMode": "true",
        }
        await self._sio.connect(
            f"{self._url}?{urlencode(query)}",
            auth={"token": self._token},
            transports=["websocket"],
            socketio_path="socket.io",
            wait_timeout=self._timeout,
        )
        await self._wait("onServerConnected")
        room = new_room_id()
        await self._sio.emit("join", build_join(room_id=room, token=self._token))
        await self._wait("clientConfiguration")
        await self._wait("joinComplete")
        await self._sio.emit("stvNewSession", build_stv_new_session(room))
        await self._sio.emit("checkAvailability", build_check_availability())
        stv = await self._wait("stvNewSession")
        await self._wait("showAgent")
        await self._wait("askPermissions")
        if self._media:
            await self._start_asr()
            url = stv.get("webrtc_url") if isinstance(stv, dict) else None
            if url:
                await self._start_stv(str(url))
        await self._sio.emit("approvedPermissions", build_approved_permissions(room))

    # -- media ----------------------------------------------------------------------------
    @staticmethod
    def _configuration() -> RTCConfiguration:
        return RTCConfiguration(iceServers=[], bundlePolicy=RTCBundlePolicy.MAX_BUNDLE)

    async def _start_asr(self) -> None:
        await self._sio.emit("asr-webrtc-init", build_asr_init(self._sio.get_sid() or ""))
        await self._wait("asr-webrtc-ready")
        self.asr = pc = RTCPeerConnection(self._configuration())
        connected = asyncio.Event()

        @pc.on("connectionstatechange")
        def _state() -> None:
            if pc.connectionState == "connected":
                connected.set()

        if self._audio is not None:
            pc.addTransceiver(self._audio, direction="sendonly")
        else:
            pc.addTransceiver("audio", direction="sendonly")
        await pc.setLocalDescription(await pc.createOffer())
        sdp = pc.localDescription.sdp
        await self._sio.emit("asr-webrtc-offer", build_asr_offer(sdp, is_reconnect=False))
        answer = await self._wait("asr-webrtc-answer")
        body = answer.get("answer", {}) if isinstance(answer, dict) else {}
        await pc.setRemoteDescription(RTCSessionDescription(sdp=body["sdp"], type="answer"))
        await asyncio.wait_for(connected.wait(), self._timeout)

    async def _start_stv(self, url: str) -> None:
        self.stv = pc = RTCPeerConnection(self._configuration())
        if self._video:
            pc.addTransceiver("video", direction="recvonly")
        pc.addTransceiver("audio", direction="recvonly")
        pc.on("track", self._on_track)
        await pc.setLocalDescription(await pc.createOffer())
        self._http = aiohttp.ClientSession()
        async with self._http.post(
            url,
            data=pc.localDescription.sdp.encode(),
            headers={"Content-Type": "application/sdp"},
            allow_redirects=False,
            timeout=aiohttp.ClientTimeout(total=self._timeout),
        ) as response:
            answer = await response.text()
            if response.status != 201:
                raise RuntimeError(f"WHEP POST answered {response.status}")
            location = response.headers.get("Location")
        self._whep_location = urljoin(url, location) if location else None
        await pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
        # The playable gate, minus the SDK's 0.3 s settle: the first decoded frame.
        await asyncio.wait_for(self._first_frame.wait(), self._timeout)

    def _on_track(self, track: MediaStreamTrack) -> None:
        task = asyncio.ensure_future(self._read(track))
        self._readers.add(task)
        task.add_done_callback(self._readers.discard)

    async def _read(self, track: MediaStreamTrack) -> None:
        """Every decoded frame, as the SDK's pump reads them (here nobody else reads)."""
        kind = track.kind
        with contextlib.suppress(MediaStreamError):
            while True:
                frame = await track.recv()
                self.frames[kind] = self.frames.get(kind, 0) + 1
                if self.on_frame is not None:
                    self.on_frame(kind, frame)
                self._first_frame.set()

    async def packets_sent(self) -> int:
        """RTP packets the uplink sender has sent (its ``outbound-rtp`` stats)."""
        if self.asr is None:
            return 0
        report = await self.asr.getStats()
        return sum(
            int(getattr(item, "packetsSent", 0) or 0)
            for item in report.values()
            if getattr(item, "type", None) == "outbound-rtp"
        )

    # -- teardown -------------------------------------------------------------------------
    async def _disconnect(self) -> None:
        """A client disconnect the server sees as one. Stock ``disconnect()`` closes the
        websocket before its DISCONNECT packet is flushed, and the staging server (like the
        real one) then holds the session for recovery: flush the packet first (the SDK
        works around the same python-socketio behaviour)."""
        sio = self._sio
        if sio.connected:
            await sio._send_packet(sio.packet_class(sio_packet.DISCONNECT, namespace="/"))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(sio.eio.queue.join(), 1.0)
        await sio.disconnect()

    async def close(self) -> None:
        """WHEP DELETE, both peers, the reader tasks, the socket: everything it opened."""
        if self._http is not None:
            if self._whep_location is not None:
                try:
                    async with self._http.delete(self._whep_location, allow_redirects=False):
                        pass
                except (aiohttp.ClientError, OSError) as exc:
                    log.info("WHEP DELETE failed: %s", type(exc).__name__)
            await self._http.close()
        for pc in (self.stv, self.asr):
            if pc is not None:
                await pc.close()
        for task in list(self._readers):
            task.cancel()
        await asyncio.gather(*self._readers, return_exceptions=True)
        if self._audio is not None:
            self._audio.stop()
        await self._disconnect()
        for fut in self._events.values():
            fut.cancel()
