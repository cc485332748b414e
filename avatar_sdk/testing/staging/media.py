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
  conversation's avatar is speaking (silence otherwise), sent as Opus packets encoded once
  per process (:class:`~avatar_sdk.testing.synthetic.OpusToneTrack`): a viewer costs no
  audio encoding. A viewer's two tracks share a
  :class:`~avatar_sdk.testing.synthetic.MediaEpoch`: the video drawn at media time ``t``
  (``read_media_time``) and the voice of ``t`` (its tone's ``onsets``) are one instant.
* **Faults** (driven through :class:`~avatar_sdk.testing.staging.faults.Faults`): ICE failure,
  media stall, frozen video, lost video packets (:mod:`.packet_loss`), jitter, reorder
  and loss on the voice (:mod:`.voice_faults`, per session), WHEP 404, stuck ICE (no
  answer / no candidates).

Every peer belongs to its conversation: closed when the conversation ends (a disconnect
that is not pending recovery, a recovery window that expires) and on server stop.
"""

from __future__ import annotations

import asyncio
import math
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web
from aiortc import RTCPeerConnection, RTCRtpSender, RTCSessionDescription
from aiortc import sdp as sdp_parser

from ...logs import sdk_logger
from ...transport.rtc.ice import set_local_description
from ...wire.names import In, Out
from ..synthetic import MediaEpoch, MediaGate, OpusToneTrack, PatternTrack
from .asr_peer import AsrPeer, AsrStats
from .packet_loss import VideoPacketLoss
from .rtc_util import (
    ICE_FAILURE_MODES,
    NO_ACTIVE_SESSION,
    STUCK_MODES,
    WHEP_PATH,
    WHEP_RESOURCE_PATH,
    IcePath,
    blackhole,
    check_channel,
    close_pc,
    h264_encoder_available,
    ice_transports,
    rtc_configuration,
    strip_candidates,
)
from .scripted import ScriptedStagingSession
from .voice_faults import (
    VoiceFaults,
    VoiceFaultSettings,
    check_jitter,
    check_rate,
    install_voice_faults,
)

if TYPE_CHECKING:
    from aiortc.mediastreams import MediaStreamTrack

    from .conversation import Conversation

    #: What owns a WHEP stream: a conversation, or a scripted avatar session.
    StreamOwner = Conversation | ScriptedStagingSession
    #: A Socket.IO handler of the ASR signalling.
    Handler = Callable[[Conversation, dict[str, Any]], Awaitable[None]]

__all__ = ["AsrPeer", "AsrStats", "IcePath", "StagingMedia", "WhepViewer", "strip_candidates"]

log = sdk_logger(__name__)


@dataclass
class WhepViewer:
    """One WHEP subscription: a server peer sending the synthetic avatar to one client."""

    resource_id: str
    stream: str
    sid: str
    pc: Any
    video: PatternTrack
    audio: MediaStreamTrack
    video_codec: str | None = None
    created_at: float = field(default_factory=time.monotonic)
    deleted: bool = False
    #: Keyframe requests (RTCP PLI) its video sender received from the client.
    keyframe_requests: int = 0
    #: Whether a keyframe request ends a :meth:`StagingMedia.freeze_video` of this viewer.
    thaw_on_keyframe_request: bool = False
    #: Its video sender's packet loss (:meth:`StagingMedia.lose_video_packets`), once armed.
    packet_loss: VideoPacketLoss | None = None
    #: Its voice sender's faults (:meth:`StagingMedia.voice_faults_of`), once armed.
    voice_faults: VoiceFaults | None = None

    def on_keyframe_request(self) -> None:
        self.keyframe_requests += 1
        if self.thaw_on_keyframe_request:
            self.thaw_on_keyframe_request = False
            self.video.freeze.resume()

    @property
    def location(self) -> str:
        return f"{WHEP_RESOURCE_PATH}{self.resource_id}"

    @property
    def connected(self) -> bool:
        return not self.deleted and self.pc.connectionState == "connected"

    @property
    def is_open(self) -> bool:
        return bool(self.pc.connectionState != "closed")


#: On every WHEP answer: any page may read it, its ``Location`` included.
WHEP_CORS_HEADERS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Expose-Headers": "Location",
}
#: The answer to a browser's preflight of a WHEP POST (``application/sdp``) or DELETE.
WHEP_PREFLIGHT_HEADERS = {
    **WHEP_CORS_HEADERS,
    "Access-Control-Allow-Methods": "POST, DELETE, OPTIONS",
    "Access-Control-Allow-Headers": "Content-Type, Authorization",
    "Access-Control-Max-Age": "600",
}


class StagingMedia:
    """The media side of :class:`~avatar_sdk.testing.StagingServer` (``staging.media``).

    Counters for assertions: ``whep_posts``, ``whep_deletes``, ``whep_statuses`` (status
    of every WHEP POST, in order), ``whep_delete_statuses``, :attr:`frames_sent` (video
    frames handed to the encoders), :meth:`live_viewers`, :meth:`open_peer_count`,
    :meth:`asr_stats`.
    """

    #: How long an ASR ICE path that died is hidden from DTLS, waiting for an ICE restart
    #: (s). None (the default): for as long as the server session lives, as a media server
    #: keeps a DTLS session whose ICE failed: a restart offer that comes after the server's
    #: consent checks gave up (a browser calls ICE failed only after about 30 s, when the
    #: server's checks give up too) is applied in place, however late, and audio flows on.
    ice_restart_grace: float | None = None
    #: Bound on a WHEP POST held by ``stuck_ice("stv", mode="no_answer")`` (s).
    stuck_hold_max = 60.0
    #: A POST finding a connected viewer waits this long for it to go before 409 (s): a
    #: client that closed its peer (DTLS close alert in flight) and re-POSTs at once is
    #: re-subscribing, not a second viewer.
    busy_grace = 0.5

    def __init__(
        self,
        conversations: Mapping[str, Conversation],
        *,
        video_size: tuple[int, int] = (320, 240),
        video_fps: float = 20.0,
        asr_report_interval: float | None = None,
    ) -> None:
        self._conversations = conversations
        #: The ASR server peers' RTCP receiver-report cadence, read at every report (so it
        #: can change mid-test): None = aiortc's own (every 0.5-1.5 s); ``S`` = at most one
        #: every ``S`` seconds, the first ``S`` after the peer was set up (a libwebrtc-like
        #: media server: 4.5 s); ``math.inf`` = never (a server that sends no RTCP).
        self.asr_report_interval = asr_report_interval
        self.video_size = video_size
        self.video_fps = video_fps
        self.h264_available = h264_encoder_available()
        self.asr_peers: dict[str, AsrPeer] = {}
        self._ended_asr: dict[str, AsrStats] = {}  # final stats of ended conversations
        self.streams: dict[str, str] = {}  # STV session id -> sid
        #: The scripted avatar sessions' streams (``open_stream``): stream -> its session.
        self._scripted: dict[str, ScriptedStagingSession] = {}
        self.viewers: dict[str, WhepViewer] = {}  # WHEP resource id -> viewer
        self.whep_posts = 0
        self.whep_deletes = 0
        self.whep_statuses: list[int] = []
        self.whep_delete_statuses: list[int] = []
        self.stv_gate = MediaGate()
        self.stuck: dict[str, str] = {}
        self.whep_404_remaining = 0
        #: WHEP viewers still to be answered with tracks that never send a frame.
        self.unplayable_remaining = 0
        self._asr_stall_until = 0.0
        self._frames_retired = 0
        self._frozen: list[WhepViewer] = []  # viewers whose video freeze_video() stopped
        #: Lasting voice faults (rates, jitter) by conversation sid (None: every one),
        #: given to later subscriptions too until :meth:`clear_faults`.
        self.voice_settings: dict[str | None, VoiceFaultSettings] = {}
        self._whep_lock = asyncio.Lock()
        self._stopping = False
        #: Seconds a WHEP POST's answer is held after its resource was created
        #: (``faults.whep_delay``): a client may close while the POST is in flight.
        self.whep_answer_delay = 0.0

    # -- wiring -------------------------------------------------------------------------------
    def handlers(self) -> dict[str, Handler]:
        """Socket.IO handlers of the ASR signalling (client → server)."""
        return {
            Out.ASR_WEBRTC_INIT: self._on_asr_init,
            Out.ASR_WEBRTC_OFFER: self._on_asr_offer,
            Out.ASR_WEBRTC_ICE_CANDIDATE: self._on_asr_candidate,
        }

    def add_routes(self, app: web.Application) -> None:
        """The WHEP endpoint, open to pages of any origin (CORS), as a WHEP server is: a
        browser's page posts its offer from another origin than the media host's."""
        app.router.add_post(WHEP_PATH, self._whep_post)
        app.router.add_post(WHEP_PATH.rstrip("/"), self._whep_post)
        app.router.add_delete(WHEP_RESOURCE_PATH + "{resource_id}", self._whep_delete)
        for path in (WHEP_PATH, WHEP_PATH.rstrip("/"), WHEP_RESOURCE_PATH + "{resource_id}"):
            app.router.add_route("OPTIONS", path, self._whep_preflight)

    async def _whep_preflight(self, request: web.Request) -> web.Response:
        return web.Response(status=204, headers=WHEP_PREFLIGHT_HEADERS)

    def on_uplink_frame(self, sid: str, rms: float, seconds: float) -> None:
        """A decoded ASR frame of ``sid``: the conversation's utterance detector hears it."""
        conv = self._conversations.get(sid)
        if conv is not None:
            conv.hear(rms, seconds)

    def register_stream(self, conv: Conversation, session_id: str) -> None:
        """``stvNewSession`` answered ``session_id``: WHEP viewers may now subscribe to it."""
        self.streams[session_id] = conv.sid

    def open_stream(self, stream: str, owner: ScriptedStagingSession) -> None:
        """A scripted avatar session's ``init-client``: WHEP viewers may subscribe to
        ``stream``, and are sent its voice."""
        self.streams[stream] = owner.sid
        self._scripted[stream] = owner

    async def close_stream(self, stream: str, owner_sid: str) -> None:
        """A scripted avatar session ended: forget ``stream``, close its viewers' peers."""
        self.streams.pop(stream, None)
        self._scripted.pop(stream, None)
        await asyncio.gather(*(close_pc(v.pc) for v in self.viewers.values() if v.sid == owner_sid))

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
        closing += [close_pc(v.pc) for v in self.viewers.values() if v.sid == sid]
        if closing:
            await asyncio.gather(*closing)

    async def stop(self) -> None:
        """Close every peer, release held requests (server shutdown)."""
        self._stopping = True
        peers = list(self.asr_peers.values())
        viewers = list(self.viewers.values())
        self.asr_peers.clear()
        self.streams.clear()
        self._scripted.clear()
        self.viewers.clear()
        self._frames_retired += sum(v.video.frames_sent for v in viewers)
        for viewer in viewers:
            if viewer.voice_faults is not None:
                viewer.voice_faults.close()
        await asyncio.gather(*(p.close() for p in peers), *(close_pc(v.pc) for v in viewers))

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

    def asr_levels_since(self, sid: str, frame: int) -> list[float]:
        """The RMS of each uplink frame of ``sid`` decoded after the first ``frame`` ones
        (``asr_stats(sid).frames`` taken earlier), oldest first; empty without a live peer."""
        peer = self.asr_peers.get(sid)
        return peer.levels_since(frame) if peer is not None else []

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

    def held_resources(self) -> list[tuple[str, str]]:
        """WHEP resources not DELETEd and ASR peers still open, as (kind, client id): the
        media side's entries of the resource ledger (:mod:`.ledger`)."""
        held = [("whep", v.sid) for v in self.viewers.values() if not v.deleted]
        return held + [("asr_peers", sid) for sid, p in self.asr_peers.items() if p.is_open]

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
        check_channel(channel)
        if mode not in ICE_FAILURE_MODES:
            raise ValueError(f"mode must be one of {ICE_FAILURE_MODES}, not {mode!r}")
        if channel == "asr":
            results = await asyncio.gather(*(p.fail(mode) for p in self.asr_peers.values()))
            return sum(results)
        viewers = [v for v in self.viewers.values() if v.is_open]
        for viewer in viewers:
            if mode == "blackhole":
                for ice in ice_transports(viewer.pc):
                    blackhole(ice._connection)
        if mode == "close":
            await asyncio.gather(*(close_pc(v.pc) for v in viewers))
        return len(viewers)

    def media_stall(self, channel: str, seconds: float | None = None) -> None:
        """RTP stops on ``channel`` while ICE stays up (None: until :meth:`clear_faults`).

        ``stv``: the synthetic tracks block, so no RTP is sent (RTCP goes on).
        ``asr``: the server drops SRTP/SRTCP both ways: no audio is received and no RTCP
        receiver report reaches the client.
        """
        check_channel(channel)
        if channel == "stv":
            self.stv_gate.stall(seconds)
        else:
            self._asr_stall_until = math.inf if seconds is None else time.monotonic() + seconds

    def freeze_video(
        self, seconds: float | None = None, *, thaw_on_keyframe_request: bool = False
    ) -> int:
        """The video of every open WHEP viewer stops (no frame, so no video RTP) while its
        voice goes on, for ``seconds`` (None: until :meth:`clear_faults`, or with
        ``thaw_on_keyframe_request`` until the client's first PLI); viewers answered later
        send video normally. Returns how many viewers were frozen."""
        self._frozen = [v for v in self._frozen if v.is_open]
        viewers = [v for v in self.viewers.values() if v.is_open]
        for viewer in viewers:
            viewer.thaw_on_keyframe_request = thaw_on_keyframe_request
            viewer.video.freeze.stall(seconds)
        self._frozen.extend(viewers)
        return len(viewers)

    def lose_video_packets(self, count: int = 1, *, resends_lost: int | None = None) -> int:
        """Every open WHEP viewer's video sender drops its next ``count`` packets and the
        first ``resends_lost`` retransmissions of each (None: every one, lost for good):
        :mod:`.packet_loss`. Returns how many viewers were armed."""
        armed = 0
        for viewer in self.viewers.values():
            if not viewer.is_open:
                continue
            if viewer.packet_loss is None:
                sender = next(
                    (t.sender for t in viewer.pc.getTransceivers() if t.kind == "video"), None
                )
                if sender is None or sender.transport is None:
                    continue
                viewer.packet_loss = VideoPacketLoss(sender)
            viewer.packet_loss.lose(count, resends_lost=resends_lost)
            armed += 1
        return armed

    def voice_loss(
        self, rate: float = 0.0, *, count: int = 0, seed: int = 0, sid: str | None = None
    ) -> int:
        """The voice of ``sid``'s subscriptions (None: every one) loses its next ``count``
        packets, and each later one with probability ``rate`` (:mod:`.voice_faults`)."""
        rate = check_rate(rate)
        settings = self.voice_settings.setdefault(sid, VoiceFaultSettings())
        settings.loss_rate, settings.loss_seed = rate, seed
        return self._arm_voice(sid, lambda f: f.lose(count, rate=rate, seed=seed))

    def voice_reorder(
        self, rate: float = 0.0, *, count: int = 0, seed: int = 0, sid: str | None = None
    ) -> int:
        """The voice of ``sid``'s subscriptions sends its next ``count`` packets, and each
        later one with probability ``rate``, right after the packet that follows it."""
        rate = check_rate(rate)
        settings = self.voice_settings.setdefault(sid, VoiceFaultSettings())
        settings.reorder_rate, settings.reorder_seed = rate, seed
        return self._arm_voice(sid, lambda f: f.reorder(count, rate=rate, seed=seed))

    def voice_jitter(self, seconds: float, *, seed: int = 0, sid: str | None = None) -> int:
        """Every voice packet of ``sid``'s subscriptions is delayed by its own draw,
        uniform in [0, ``seconds``]."""
        seconds = check_jitter(seconds)
        settings = self.voice_settings.setdefault(sid, VoiceFaultSettings())
        settings.jitter, settings.jitter_seed = seconds, seed
        return self._arm_voice(sid, lambda f: f.jitter(seconds, seed=seed))

    def _arm_voice(self, sid: str | None, arm: Callable[[VoiceFaults], None]) -> int:
        armed = 0
        for viewer in self.viewers.values():
            if not viewer.is_open or sid not in (None, viewer.sid):
                continue
            faults = self.voice_faults_of(viewer)
            if faults is not None:
                arm(faults)
                armed += 1
        return armed

    def voice_faults_of(self, viewer: WhepViewer) -> VoiceFaults | None:
        """``viewer``'s voice faults, installed on its audio sender at the first call."""
        if viewer.voice_faults is None:
            viewer.voice_faults = install_voice_faults(viewer.pc)
        return viewer.voice_faults

    def whep_404(self, times: int = 1) -> None:
        self.whep_404_remaining += max(0, times)

    def unplayable_whep(self, times: int = 1) -> None:
        """The next ``times`` WHEP viewers are answered (201, ICE connects) with tracks that
        never send a frame: a downlink that never becomes playable."""
        self.unplayable_remaining += max(0, times)

    def _viewer_gate(self) -> MediaGate:
        if self.unplayable_remaining <= 0:
            return self.stv_gate
        self.unplayable_remaining -= 1
        gate = MediaGate()
        gate.stall(None)
        return gate

    def stuck_ice(self, channel: str, mode: str = "no_answer") -> None:
        check_channel(channel)
        if mode not in STUCK_MODES:
            raise ValueError(f"mode must be one of {STUCK_MODES}, not {mode!r}")
        self.stuck[channel] = mode

    def clear_faults(self) -> None:
        """Back to healthy (held WHEP POSTs whose client still waits are answered)."""
        self.stv_gate.resume()
        for viewer in self._frozen:
            viewer.video.freeze.resume()
        self._frozen.clear()
        self.voice_settings.clear()
        for viewer in self.viewers.values():
            if viewer.voice_faults is not None:
                viewer.voice_faults.clear()
        self._asr_stall_until = 0.0
        self.stuck.clear()
        self.whep_404_remaining = 0
        self.unplayable_remaining = 0
        self.whep_answer_delay = 0.0

    def finish_answer(self, channel: str, pc: Any) -> str:
        """The answer SDP to send, with ``stuck_ice(..., mode="no_candidates")`` applied."""
        answer = str(pc.localDescription.sdp)
        if self.stuck.get(channel) != "no_candidates":
            return answer
        # Stuck for real: no candidate in the answer, and a server that never answers the
        # client's checks (else the client would still connect through peer-reflexive ones).
        for ice in ice_transports(pc):
            blackhole(ice._connection)
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
        return web.Response(status=status, text=text, headers=WHEP_CORS_HEADERS)

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
                    await close_pc(stale.pc)
            try:
                viewer = await self._new_viewer(conv, stream, offer)
            except Exception as exc:  # an offer aiortc cannot answer (bad SDP, no codec)
                log.info("WHEP offer for %s refused: %r", stream, exc)
                return self._whep_reply(400, f"bad offer: {exc}")
            answer = self.finish_answer("stv", viewer.pc)
        if self.whep_answer_delay > 0:  # the resource exists: a client gone now leaves it
            await asyncio.sleep(self.whep_answer_delay)
        self.whep_statuses.append(201)
        return web.Response(
            status=201,
            body=answer.encode(),
            content_type="application/sdp",
            headers={"Location": viewer.location, **WHEP_CORS_HEADERS},
        )

    async def _viewer_gone(self, stream: str) -> bool:
        deadline = time.monotonic() + self.busy_grace
        while self.live_viewers(stream):
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    def _stream_conversation(self, stream: str) -> StreamOwner | None:
        sid = self.streams.get(stream)
        if sid is not None and sid.startswith("scripted-"):
            session = self._scripted.get(stream)
            return session if session is not None and not session.ended else None
        conv = self._conversations.get(sid) if sid is not None else None
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

    async def _new_viewer(self, conv: StreamOwner, stream: str, offer: str) -> WhepViewer:
        parsed = sdp_parser.SessionDescription.parse(offer)
        if not any(m.kind in ("video", "audio") for m in parsed.media):
            raise ValueError("the offer has no audio or video m-line")
        width, height = self.video_size
        gate = self._viewer_gate()
        # One media time for both tracks: the video drawn at t is the voice of t.
        epoch = MediaEpoch()
        video = PatternTrack(width=width, height=height, fps=self.video_fps, gate=gate, epoch=epoch)
        audio: MediaStreamTrack
        if isinstance(conv, ScriptedStagingSession):  # its voice: the audio it was given
            audio = conv.voice_track(gate)
        else:
            talking = conv
            audio = OpusToneTrack(
                active=lambda: talking.speaking and not talking.ended, gate=gate, epoch=epoch
            )
        pc = RTCPeerConnection(rtc_configuration())
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
            await set_local_description(pc, await pc.createAnswer())
        except BaseException:
            await close_pc(pc)
            raise
        if self._stopping or conv.ended:  # ended while answering: nobody would close it
            await close_pc(pc)
            raise RuntimeError("the conversation has ended")
        answer = sdp_parser.SessionDescription.parse(pc.localDescription.sdp)
        for media in answer.media:
            if media.kind == "video" and media.rtp.codecs:
                viewer.video_codec = media.rtp.codecs[0].mimeType
        _count_keyframe_requests(pc, viewer)
        settings = self.voice_settings.get(conv.sid, self.voice_settings.get(None))
        if settings is not None:  # the session's lasting voice faults, on its new viewer
            faults = self.voice_faults_of(viewer)
            if faults is not None:
                settings.apply(faults)
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
            return web.Response(status=404, text="unknown WHEP resource", headers=WHEP_CORS_HEADERS)
        viewer.deleted = True
        self._frames_retired += viewer.video.frames_sent
        await close_pc(viewer.pc)
        self.whep_delete_statuses.append(200)
        return web.Response(status=200, headers=WHEP_CORS_HEADERS)


def _count_keyframe_requests(pc: Any, viewer: WhepViewer) -> None:
    """Tell ``viewer`` of each PLI its video sender receives: aiortc 1.16's
    ``RTCRtpSender._handle_rtcp_packet`` calls ``self._send_keyframe()`` on a PLI, so an
    instance attribute of that name is called first (then aiortc's own)."""
    for transceiver in pc.getTransceivers():
        sender = transceiver.sender
        if transceiver.kind != "video" or not callable(getattr(sender, "_send_keyframe", None)):
            continue
        original = sender._send_keyframe

        def on_pli(original: Any = original) -> None:
            viewer.on_keyframe_request()
            original()

        sender._send_keyframe = on_pli
