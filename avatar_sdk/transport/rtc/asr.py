"""AsrUplink: the user's microphone to the server (aiortc, send-only, SDP over the socket).

The peer never sees the application's track directly: it sends an :class:`UplinkTrack` that
wraps it. Muting, swapping the source (``switch_audio``) and surviving a failing device
then happen inside that wrapper, with no renegotiation, and the RTP timestamps stay
continuous whatever the source does.

A source may also yield Opus ``av.Packet``s (48 kHz; the uplink negotiates Opus only,
PROTOCOL.md): they go out as they are, with no decode or encode on our side, which is the
cheapest uplink. Each peer keeps one RTP timeline: once a packet went out on it, PCM frames
(a PCM source, mute, silence) are encoded on the loop by that peer's own mono voice
encoder instead of aiortc's, whose timestamps restart at its first frame and whose
resampler rejects a gap in frame pts.

``encode_on_loop=True`` (``AvatarSession(audio_codec="loop")``) starts a peer in that mode:
every PCM frame is encoded on the loop from the first one, so aiortc's encoder thread (a
hand-off per 20 ms frame) and its stereo 96 kb/s encoder are never used.
"""

from __future__ import annotations

import asyncio
import fractions
import functools
from collections import deque
from collections.abc import Callable
from typing import Any

import av
from aiortc import RTCConfiguration, RTCPeerConnection
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from aiortc.sdp import candidate_from_sdp

from ...clock import SYSTEM_CLOCK, Clock
from ...errors import AvatarError, ErrorCode
from ...logs import sdk_logger
from ...media.devices import classify_device_error
from ...media.grid import grid_anchor
from ...media.levels import frame_rms
from ...media.opus import (
    FRAME_SAMPLES,
    OPUS_SILENCE,
    SAMPLE_RATE,
    VOICE_BITRATE,
    VoiceEncoder,
    opus_packet_samples,
    opus_silence,
    packet_samples,
)
from ...media.opus import TIME_BASE as OPUS_TIME_BASE
from ...release_once import ReleaseOnce
from .consent import ConsentProbe, ConsentWatch, probe_interval
from .ice import apply_answer, close_peer, set_local_description

__all__ = [
    "OPUS_SILENCE",
    "VOICE_BITRATE",
    "AsrUplink",
    "UplinkTrack",
    "classify_source_error",
    "opus_packet_samples",
    "opus_silence",
]

log = sdk_logger(__name__)

#: What paces the uplink's own silence: real-time audio, so always the system clock.
_REAL_TIME: Clock = SYSTEM_CLOCK

SourceErrorSink = Callable[[ErrorCode, BaseException], None]


def classify_source_error(exc: BaseException) -> ErrorCode:
    """Map an audio device failure to its public code (CONTRACT: audio source failures).

    Anything the device table does not recognise counts as a busy device: the source is
    unusable now, and ``switch_audio()`` can attach another one.
    """
    return classify_device_error(exc) or ErrorCode.DEVICE_BUSY


def _silence(samples: int = FRAME_SAMPLES, rate: int = SAMPLE_RATE) -> av.AudioFrame:
    frame = av.AudioFrame(format="s16", layout="mono", samples=samples)
    for plane in frame.planes:
        plane.update(bytes(plane.buffer_size))
    frame.sample_rate = rate
    return frame


@functools.lru_cache(maxsize=8)
def _zeros(size: int) -> bytes:
    return bytes(size)


def _is_digital_silence(frame: av.AudioFrame) -> bool:
    """An s16 48 kHz frame of whole 20 ms blocks, all zero (what mute and no source send)."""
    if frame.format.name != "s16" or frame.sample_rate != SAMPLE_RATE:
        return False
    if not frame.samples or frame.samples % FRAME_SAMPLES:
        return False
    size = frame.samples * 2 * len(frame.layout.channels)
    # A bytes comparison is one memcmp (0.1 us); numpy's any() costs 25x that per frame.
    return memoryview(frame.planes[0])[:size].tobytes() == _zeros(size)


#: Told of each PCM frame the uplink sends: its RMS level (0.0 when muted or silence) and
#: its duration in seconds; must be cheap and never raise (the session's end-of-speech
#: detection, :mod:`avatar_sdk.session.core.speech_end`).
LevelSink = Callable[[float, float], None]


class UplinkTrack(MediaStreamTrack):
    """What the ASR peer sends: the current source, silenced when muted or absent.

    ``on_level`` hears the level of every PCM frame sent (what the server will hear); an
    Opus packet passed through undecoded is not measured (an encoded uplink has no
    end-of-speech detection)."""

    kind = "audio"

    def __init__(
        self,
        source: MediaStreamTrack | None,
        on_error: SourceErrorSink | None = None,
        on_level: LevelSink | None = None,
    ) -> None:
        super().__init__()
        self._source = source
        self._on_error = on_error
        self._on_level = on_level
        self.muted = False
        self._pts = 0
        self._started: float | None = None
        self.frames_sent = 0
        self.source_frames = 0

    @property
    def source(self) -> MediaStreamTrack | None:
        return self._source

    def switch(self, source: MediaStreamTrack | None) -> None:
        """Send from ``source`` from the next frame on (None: silence)."""
        self._source = source

    async def recv(self) -> av.AudioFrame | av.Packet[Any]:
        if self.readyState != "live":
            raise MediaStreamError
        return await self.produce()

    async def produce(self) -> av.AudioFrame | av.Packet[Any]:
        """The next frame or Opus packet to send (each peer reads through its own relay)."""
        frame: av.AudioFrame | None = None
        source = self._source
        if source is not None:
            try:
                got = await source.recv()
                if isinstance(got, av.AudioFrame):
                    frame = got
                    self.source_frames += 1
                elif isinstance(got, av.Packet):
                    self.source_frames += 1
                    samples = packet_samples(got)
                    if not self.muted:
                        got.pts = self._pts
                        got.time_base = OPUS_TIME_BASE
                        self._pts += samples
                        self.frames_sent += 1
                        return got
                    frame = _silence(samples)  # muted: the peer encodes the silence
            except MediaStreamError:
                self._source = None  # the source ended: carry on with silence
            except Exception as exc:
                self._source = None
                if self._on_error is not None:
                    self._on_error(classify_source_error(exc), exc)
        if frame is None:
            frame = await self._paced_silence()
            self._level(0.0, frame)
        elif self.muted:
            frame = _silence(frame.samples, frame.sample_rate or SAMPLE_RATE)
            self._level(0.0, frame)
        elif self._on_level is not None:
            try:
                level = frame_rms(frame)
            except Exception:  # an odd frame: no level from it, the frame still goes
                level = 0.0
            self._level(level, frame)
        frame.pts = self._pts
        frame.time_base = fractions.Fraction(1, frame.sample_rate or SAMPLE_RATE)
        self._pts += frame.samples
        self.frames_sent += 1
        return frame

    def _level(self, level: float, frame: av.AudioFrame) -> None:
        if self._on_level is not None:
            self._on_level(level, frame.samples / (frame.sample_rate or SAMPLE_RATE))

    async def _paced_silence(self) -> av.AudioFrame:
        # Real-time audio: silence is paced on the system clock whatever clock the session
        # was given (a fake one would never let the sender pull a frame), like the sources
        # in avatar_sdk.media.
        now = _REAL_TIME.monotonic()
        if self._started is None:
            self._started = grid_anchor(now, self._pts / SAMPLE_RATE)
        due = self._started + self._pts / SAMPLE_RATE
        if due > now:
            await _REAL_TIME.sleep(due - now)
        else:
            self._started = grid_anchor(now, self._pts / SAMPLE_RATE)  # no burst after a stall
        return _silence()


class _PeerTrack(MediaStreamTrack):
    """One peer's view of the uplink track.

    aiortc stops the track of every sender when its peer closes; giving each peer its own
    relay keeps the session's :class:`UplinkTrack` (source, mute, timestamps) alive across
    the peers that cold reconnects and renegotiations build.
    """

    kind = "audio"

    def __init__(self, uplink: UplinkTrack, *, encode_on_loop: bool = False) -> None:
        super().__init__()
        self._uplink = uplink
        #: Set each time the peer's sender asks for a frame. aiortc's sender asks for the
        #: next frame only once the previous one's RTP packets went out, so this is the
        #: moment to look at its ``packetsSent`` again (see AsrUplink.wait_sending).
        self.pulled = asyncio.Event()
        #: Uplink pts of this peer's first output: its RTP timeline starts there, as
        #: aiortc's encoder starts its timestamps at its first frame.
        self._base: int | None = None
        #: Set by the first packet (or at once, encoding on the loop): from then on this
        #: peer sends packets only.
        self._encoder: VoiceEncoder | None = VoiceEncoder() if encode_on_loop else None
        self._encoded: deque[av.Packet[Any]] = deque()
        self._next_pts = 0  # this peer's timeline after the last packet sent
        self.pcm_to_aiortc = 0  # frames left to aiortc's encoder thread
        #: Added to every pts read from the uplink: after a :meth:`rebind`, the new
        #: uplink's timeline continues where the old one's left off on this peer.
        self._offset = 0
        self._expected: int | None = None
        self._rebase = False

    def rebind(self, uplink: UplinkTrack) -> None:
        """Send from ``uplink`` from the next frame on, on the same RTP timeline."""
        self._uplink = uplink
        self._rebase = True

    def _continue(self, out: av.AudioFrame | av.Packet[Any]) -> None:
        pts = out.pts or 0
        if self._rebase:
            self._rebase = False
            if self._expected is not None:
                self._offset = self._expected - pts
        pts += self._offset
        out.pts = pts
        samples = out.samples if isinstance(out, av.AudioFrame) else packet_samples(out)
        self._expected = pts + samples

    async def recv(self) -> av.AudioFrame | av.Packet[Any]:
        self.pulled.set()
        while True:
            if self._encoded:
                return self._stamp(self._encoded.popleft(), None)
            if self.readyState != "live" or self._uplink.readyState != "live":
                raise MediaStreamError
            out = await self._uplink.produce()
            self._continue(out)
            if self._base is None:
                self._base = out.pts or 0
            if isinstance(out, av.Packet):
                if self._encoder is None:
                    self._encoder = VoiceEncoder()
                return self._stamp(out, (out.pts or 0) - self._base)
            if self._encoder is None:
                self.pcm_to_aiortc += 1
                return out  # PCM only so far: aiortc encodes it
            # A gap (samples sent as packets meanwhile) moves the timeline forward.
            self._next_pts = max(self._next_pts, (out.pts or 0) - self._base)
            if _is_digital_silence(out):
                self._encoded.extend(opus_silence() for _ in range(out.samples // FRAME_SAMPLES))
            else:
                self._encoded.extend(self._encoder.encode(out))

    def _stamp(self, packet: av.Packet[Any], pts: int | None) -> av.Packet[Any]:
        """``packet`` at ``pts`` on this peer's timeline (None: right after the last one)."""
        at = self._next_pts if pts is None else max(pts, self._next_pts)
        packet.pts = at
        packet.time_base = OPUS_TIME_BASE
        self._next_pts = at + packet_samples(packet)
        return packet


class AsrUplink:
    """One ASR peer connection (send-only audio), negotiated by the caller over the socket."""

    def __init__(
        self,
        *,
        configuration: RTCConfiguration,
        track: UplinkTrack,
        clock: Clock,
        encode_on_loop: bool = False,
        consent_deadline: float = 2.0,
    ) -> None:
        """``encode_on_loop``: encode PCM with the mono voice encoder on the event loop
        instead of aiortc's encoder thread (see the module docstring). ``clock``: the
        session's; ``connected_at`` seeds the receiver-report cadence its watchdog judges.
        ``consent_deadline``: seconds without an answer to the SDK's ICE consent requests
        after which the path counts as dead (``SessionConfig.media_stall_timeout``; see
        :mod:`.consent`)."""
        self._clock = clock
        self.track = track
        self.pc = RTCPeerConnection(configuration)
        self._peer_track = _PeerTrack(track, encode_on_loop=encode_on_loop)
        self._transceiver = self.pc.addTransceiver(self._peer_track, direction="sendonly")
        self._connected = asyncio.Event()
        self.connected_at: float | None = None
        self._release_once = ReleaseOnce()
        #: The path's liveness from the peer's first moment (ICE consent at our rate).
        self.consent = ConsentWatch(consent_deadline, clock=clock.monotonic)
        self._probe = ConsentProbe(self.pc, self.consent, interval=probe_interval(consent_deadline))
        self.state_listeners: list[Callable[[str], Any]] = []
        self.pc.on("connectionstatechange", self._on_state)

    def rebind(self, track: UplinkTrack) -> None:
        """Send from ``track`` from the next frame on, no renegotiation (a renewal's swap)."""
        self.track = track
        self._peer_track.rebind(track)

    def _on_state(self) -> None:
        state = self.pc.connectionState
        if state == "connected":
            if self.connected_at is None:
                self.connected_at = self._clock.monotonic()
                self.consent.start(self.connected_at)
                self._probe.start()
            self._connected.set()
        elif state in ("failed", "closed"):
            self._probe.halt()  # no request into sockets that are closing
        for listener in list(self.state_listeners):
            listener(state)

    @property
    def state(self) -> str:
        return str(self.pc.connectionState)

    async def create_offer(self) -> str:
        """Local offer SDP (aiortc gathers its candidates into it)."""
        offer = await self.pc.createOffer()
        await set_local_description(self.pc, offer)
        return str(self.pc.localDescription.sdp)

    async def accept_answer(self, sdp: str) -> None:
        await apply_answer(self.pc, sdp, ErrorCode.ASR_FAILED, "answer SDP")

    async def add_remote_candidate(
        self, candidate: str, sdp_mline_index: int | None, sdp_mid: str | None
    ) -> None:
        """Trickled server candidate; junk is ignored (the reference swallows errors too)."""
        text = candidate.strip()
        if text.startswith("candidate:"):
            text = text[len("candidate:") :]
        if not text:
            return
        try:
            ice = candidate_from_sdp(text)
            ice.sdpMLineIndex = sdp_mline_index if sdp_mline_index is not None else 0
            ice.sdpMid = sdp_mid
            await self.pc.addIceCandidate(ice)
        except Exception as exc:
            log.debug("ignored remote ASR candidate: %s", type(exc).__name__)

    async def wait_connected(self, timeout: float) -> None:
        try:
            async with asyncio.timeout(timeout):
                await self._connected.wait()
        except TimeoutError:
            raise AvatarError(
                ErrorCode.ASR_FAILED, f"uplink not connected within {timeout:.3g}s"
            ) from None

    async def packets_sent(self) -> int:
        """RTP packets this peer's sender has sent (its public ``outbound-rtp`` stats)."""
        report = await self._transceiver.sender.getStats()
        return sum(
            int(getattr(item, "packetsSent", 0) or 0)
            for item in report.values()
            if getattr(item, "type", None) == "outbound-rtp"
        )

    async def wait_sending(self, timeout: float) -> None:
        """Until the sender has sent RTP on this peer (after :meth:`wait_connected`).

        Woken by each frame the sender pulls from the track (no polling clock): the first
        packet goes out a few ms after DTLS connects, and the sender pulls its next frame
        right after sending it.
        """
        pulled = self._peer_track.pulled
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            pulled.clear()  # before reading the count: a pull meanwhile wakes us at once
            if await self.packets_sent() > 0:
                return
            if self.pc.connectionState in ("failed", "closed"):
                raise AvatarError(ErrorCode.ASR_FAILED, f"uplink {self.pc.connectionState}")
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                raise AvatarError(
                    ErrorCode.ASR_FAILED, f"uplink connected but sent no RTP within {timeout:.3g}s"
                )
            try:
                async with asyncio.timeout(left):
                    await pulled.wait()
            except TimeoutError:
                continue

    async def close(self, timeout: float = 1.0) -> None:
        """Close the peer and every UDP socket it bound, within ``timeout`` seconds.

        Once, to the end (:class:`~avatar_sdk.release_once.ReleaseOnce`): a renegotiation
        closing the old uplink is cancelled by ``close()`` of the session, which must not
        leave that peer open."""
        await self._release_once.run(lambda: self._release(timeout))

    async def _release(self, timeout: float) -> None:
        await self._probe.stop()
        await close_peer(self.pc, timeout)
