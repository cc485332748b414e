"""Pre-encoded uplink sources: Opus packets that go out as they are, never decoded here.

The cheapest uplink is the one that encodes nothing: these sources yield Opus
``av.Packet``s (48 kHz, durations set) that the uplink sends unchanged (see
:mod:`avatar_sdk.transport.rtc.asr`). They mix with PCM sources through ``switch_audio()``.

* :class:`OpusFileSource` demuxes an Ogg/Opus file with PyAV (no decoder is ever opened)
  and paces its packets in real time by each packet's length.
* :class:`EncodedSilenceSource` sends the 3-byte Opus silence frame every 20 ms.
* :class:`EncodedToneSource` cycles through one second of a tone encoded once per process
  (:func:`~.opus.encoded_tone`): an audible bot uplink that encodes nothing per packet.

All pace like the PCM sources: the first packet at once, then one per packet length of
monotonic time; a consumer more than :data:`_MAX_LAG` behind re-anchors instead of
receiving a burst of stale audio. The schedule runs on the system clock unless one is
injected with ``clock=`` (a test drives it with a :class:`~avatar_sdk.clock.FakeClock`
rather than measuring a loaded machine). Every packet carries its ``pts`` (samples since the
source started) so a bare aiortc sender, which takes the RTP timestamp from it, can send
them too; the SDK's uplink restamps them on its own timeline.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any, Final

import av
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from ..besteffort import best_effort
from ..clock import SYSTEM_CLOCK, Clock
from ..errors import AvatarError, ErrorCode
from ..logs import sdk_logger
from .devices import classify_device_error, describe, device_error
from .fileopen import check_local_file, display, open_error
from .grid import grid_anchor
from .opus import (
    FRAME_SAMPLES,
    OPUS_SILENCE,
    SAMPLE_RATE,
    check_tone,
    encoded_tone,
    opus_packet,
    opus_packet_samples,
)

__all__ = ["EncodedSilenceSource", "EncodedToneSource", "OpusFileSource", "opus_file_or_none"]

log = sdk_logger(__name__)

#: The same rule as the PCM sources': this far behind the schedule, re-anchor (seconds).
_MAX_LAG: Final = 0.2


class _Pacer:
    """Real-time schedule of a packet stream on ``clock``: packet n is due when its pts is."""

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock: Clock = clock if clock is not None else SYSTEM_CLOCK
        self.pts = 0  # samples sent before the next packet
        self._anchor: float | None = None  # clock time of pts 0

    async def wait(self, track: MediaStreamTrack) -> None:
        """Until the next packet is due (raises MediaStreamError if ``track`` stops)."""
        now = self._clock.monotonic()
        if self._anchor is None:
            self._anchor = grid_anchor(now, self.pts / SAMPLE_RATE)
            return
        due = self._anchor + self.pts / SAMPLE_RATE
        if due > now:
            await self._clock.sleep(due - now)
            if track.readyState != "live":
                raise MediaStreamError
        elif now - due > _MAX_LAG:
            self._anchor = grid_anchor(now, self.pts / SAMPLE_RATE)  # no burst after a stall

    def sent(self, samples: int) -> None:
        self.pts += samples


class _CycledPackets(MediaStreamTrack):
    """A paced stream of 20 ms Opus packets taken from a fixed cycle of payloads."""

    kind = "audio"

    def __init__(self, cycle: tuple[bytes, ...], clock: Clock | None = None) -> None:
        super().__init__()
        self._cycle = cycle
        self._pacer = _Pacer(clock)
        self.packets = 0

    async def recv(self) -> av.Packet[Any]:
        if self.readyState != "live":
            raise MediaStreamError
        await self._pacer.wait(self)
        pts = self._pacer.pts
        self._pacer.sent(FRAME_SAMPLES)  # committed once due: a cancel skips nothing
        self.packets += 1
        payload = self._cycle[(pts // FRAME_SAMPLES) % len(self._cycle)]
        return opus_packet(payload, FRAME_SAMPLES, pts)


class EncodedSilenceSource(_CycledPackets):
    """Pre-encoded digital silence: keeps an uplink alive for the cost of a 3-byte copy."""

    def __init__(self, *, clock: Clock | None = None) -> None:
        super().__init__((OPUS_SILENCE,), clock)


class EncodedToneSource(_CycledPackets):
    """A continuous sine tone as pre-encoded Opus: :class:`~.sources.ToneSource`'s sound
    for the cost of a copy per 20 ms packet.

    One second of the tone is encoded once per process per (frequency, amplitude) by the
    voice encoder (mono, 32 kb/s; a few milliseconds, in the constructor) and shared by
    every source; the source cycles through those 50 packets. An integer frequency loops
    without a seam; another one has a phase jump once a second. Made for bots and load
    tests that need an audible uplink on many sessions at once.

    :raises AvatarError: ``invalid_argument`` for a frequency outside (0, 24000) Hz or an
        amplitude outside [0, 1].
    """

    def __init__(
        self, frequency: float = 440.0, amplitude: float = 0.3, *, clock: Clock | None = None
    ) -> None:
        self.frequency, self.amplitude = check_tone(frequency, amplitude)
        super().__init__(encoded_tone(self.frequency, self.amplitude), clock)


class _NotPlainOpus(AvatarError):
    """The file opened, but its audio is not one mono or stereo Opus stream."""

    def __init__(self, detail: str) -> None:
        super().__init__(ErrorCode.INVALID_ARGUMENT, detail)


class OpusFileSource(MediaStreamTrack):
    """An Ogg/Opus file sent as it is: demuxed with PyAV, never decoded or re-encoded.

    Any local file FFmpeg demuxes whose first audio stream is mono or stereo Opus works
    (``.opus``/``.ogg``, WebM too). Packets are paced in real time by their own length
    (read from each packet's TOC byte) on ``clock`` (default: the system clock); the file
    is read on the event loop, a few kilobytes at a time. At the end of the file the track
    ends (``MediaStreamError``: a session's uplink carries on with silence) and releases the
    file, unless ``loop=True``, which starts again from the beginning. ``stop()`` releases
    it early.

    :raises AvatarError: ``device_not_found`` for a missing file, ``permission_denied``
        when it may not be read, ``invalid_argument`` for a directory, a URL (use
        :func:`~avatar_sdk.media.file_source`), a file FFmpeg cannot parse, one with no
        audio, or audio that is not Opus (or is multichannel Opus).
    """

    kind = "audio"

    def __init__(
        self, path: str | os.PathLike[str], *, loop: bool = False, clock: Clock | None = None
    ) -> None:
        target = os.fspath(path)
        shown = display(target)
        if "://" in target:
            raise AvatarError(
                ErrorCode.INVALID_ARGUMENT,
                f"{shown}: OpusFileSource reads local files (file_source plays URLs)",
            )
        check_local_file(target, shown)
        try:
            container: Any = av.open(target)
        except Exception as exc:
            raise open_error(exc, shown) from exc
        try:
            self._stream = _plain_opus_stream(container, shown)
        except BaseException:
            container.close()
            raise
        super().__init__()
        self.path = target
        self.loop = loop
        self._shown = shown
        self._container: Any = container
        self._packets: Iterator[Any] = container.demux(self._stream)
        self._pending: bytes | None = None
        self._read_this_pass = 0
        self._pacer = _Pacer(clock)
        self.packets = 0
        self.loops = 0

    async def recv(self) -> av.Packet[Any]:
        if self.readyState != "live":
            raise MediaStreamError
        if self._pending is None:
            self._pending = self._read()
        await self._pacer.wait(self)
        payload, self._pending = self._pending, None  # committed once due
        samples = opus_packet_samples(payload) or FRAME_SAMPLES
        pts = self._pacer.pts
        self._pacer.sent(samples)
        self.packets += 1
        return opus_packet(payload, samples, pts)

    def _read(self) -> bytes:
        """The next packet's payload; at the end, loop or end the track."""
        while True:
            try:
                packet = next(self._packets)
            except StopIteration:
                if self.loop and self._read_this_pass and self._rewind():
                    continue
                self.stop()  # end of file: release it now
                raise MediaStreamError from None
            except Exception as exc:
                self.stop()
                code = classify_device_error(exc) or ErrorCode.DEVICE_BUSY
                raise device_error(code, f"{self._shown}: read failed ({describe(exc)})") from exc
            if packet.size:  # skip the empty flush packet the demuxer ends with
                self._read_this_pass += 1
                return bytes(packet)

    def _rewind(self) -> bool:
        try:
            self._container.seek(0, stream=self._stream)
        except Exception as exc:
            log.warning("%s: cannot loop (%s)", self._shown, type(exc).__name__)
            return False
        self._packets = self._container.demux(self._stream)
        self._read_this_pass = 0
        self.loops += 1
        return True

    def stop(self) -> None:
        super().stop()
        container, self._container = self._container, None
        if container is not None:
            with best_effort("closing an Opus file", log):
                container.close()


def _plain_opus_stream(container: Any, shown: str) -> Any:
    """The file's first audio stream when it is mono or stereo Opus; else an AvatarError."""
    streams = container.streams.audio
    if not streams:
        raise AvatarError(ErrorCode.INVALID_ARGUMENT, f"{shown} has no audio stream")
    stream = streams[0]
    name = stream.codec_context.name
    if name != "opus":
        raise _NotPlainOpus(f"{shown}: its audio is {name}, not Opus (file_source decodes it)")
    if (stream.codec_context.channels or 1) > 2:
        # Multichannel Ogg/Opus packets are multistream: an RTP Opus peer cannot decode them.
        raise _NotPlainOpus(f"{shown}: multichannel Opus cannot be sent as it is")
    return stream


def opus_file_or_none(target: str, *, loop: bool = False) -> OpusFileSource | None:
    """``OpusFileSource(target)`` when the file is plain Opus; None when its audio is
    something else (``file_source`` then decodes it). Other failures raise."""
    try:
        return OpusFileSource(target, loop=loop)
    except _NotPlainOpus:
        return None
