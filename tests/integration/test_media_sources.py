"""Media sources and sinks over real aiortc peers on loopback (offer/answer done in-process).

Also: the local sources' frame format and pacing, file playback, and the microphone
source against a fake sounddevice backend (no audio hardware on CI).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fractions
import itertools
import logging
import math
import sys
import threading
import time
import types
import wave
from array import array
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import av
import pytest
import pytest_asyncio
from aiortc import RTCConfiguration, RTCPeerConnection
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from avatar_sdk import AvatarError, ErrorCode
from avatar_sdk.media import (
    FRAME_SAMPLES,
    SAMPLE_RATE,
    AudioLevelMeter,
    DeviceBusyError,
    DeviceNotFoundError,
    DevicePermissionError,
    FailingSource,
    FrameIterator,
    MicrophoneSource,
    SilenceSource,
    ToneSource,
    classify_device_error,
    file_source,
    frame_rms,
    record_avatar,
)

from .conftest import until

# --------------------------------------------------------------------------- loopback


@dataclass
class Link:
    """A sender peer with ``source`` on it and the receiver peer's copy of the track."""

    sender: RTCPeerConnection
    receiver: RTCPeerConnection
    source: MediaStreamTrack
    remote: MediaStreamTrack


@dataclass
class Loopback:
    links: list[Link] = field(default_factory=list)

    async def connect(self, source: MediaStreamTrack) -> Link:
        config = RTCConfiguration(iceServers=[])  # host candidates only: nothing leaves the box
        sender, receiver = RTCPeerConnection(config), RTCPeerConnection(config)
        received: asyncio.Future[MediaStreamTrack] = asyncio.get_running_loop().create_future()
        receiver.on("track", received.set_result)
        link = Link(sender, receiver, source, source)
        self.links.append(link)
        sender.addTrack(source)
        await sender.setLocalDescription(await sender.createOffer())
        await receiver.setRemoteDescription(sender.localDescription)
        await receiver.setLocalDescription(await receiver.createAnswer())
        await sender.setRemoteDescription(receiver.localDescription)
        link.remote = await asyncio.wait_for(received, 5)
        return link

    async def close(self) -> None:
        for link in self.links:
            await link.sender.close()
            await link.receiver.close()
            link.source.stop()
            link.remote.stop()


@pytest_asyncio.fixture
async def loopback() -> AsyncIterator[Loopback]:
    pair = Loopback()
    try:
        yield pair
    finally:
        await pair.close()


async def take(source: AsyncIterator[Any], count: int, timeout: float = 5.0) -> list[Any]:
    """The next ``count`` items of an async iterator, within ``timeout``."""
    out: list[Any] = []
    async with asyncio.timeout(timeout):
        async for item in source:
            out.append(item)
            if len(out) == count:
                break
    return out


def recorder_tasks() -> list[asyncio.Task[Any]]:
    return [
        t
        for t in asyncio.all_tasks()
        if not t.done()
        and any(name in t.get_name() for name in ("avatar_sdk.media.Recorder", "FrameIterator"))
    ]


async def test_tone_is_heard_by_the_receiver(loopback: Loopback) -> None:
    link = await loopback.connect(ToneSource(440.0, amplitude=0.3))
    async with AudioLevelMeter(link.remote, threshold=0.05) as meter:
        first = await asyncio.wait_for(meter.wait_for_speech(), 5)
        levels = await take(meter, 10)
    assert first >= 0.05
    # 0.3 full scale is 0.21 RMS; Opus and aiortc's mono→stereo mix (-3 dB) leave ~0.15.
    assert all(0.05 < level < 0.3 for level in levels), levels
    assert meter.speaking and meter.peak >= max(levels)


async def test_silence_is_silent_at_the_receiver(loopback: Loopback) -> None:
    link = await loopback.connect(SilenceSource())
    async with AudioLevelMeter(link.remote) as meter:
        levels = await take(meter, 20)
    assert max(levels) == pytest.approx(0.0, abs=1e-4)
    assert not meter.speaking


async def test_frame_iterator_ends_when_the_sender_closes(loopback: Loopback) -> None:
    link = await loopback.connect(ToneSource())
    frames: list[Any] = []
    async with FrameIterator(link.remote) as iterator:
        async with asyncio.timeout(5):
            async for frame in iterator:
                frames.append(frame)
                if len(frames) == 5:
                    await link.sender.close()
        assert iterator.closed
    assert len(frames) >= 5
    assert all(isinstance(f, av.AudioFrame) and f.sample_rate == SAMPLE_RATE for f in frames)
    assert not recorder_tasks()


async def test_recorder_writes_the_received_audio(loopback: Loopback, tmp_path: Path) -> None:
    link = await loopback.connect(ToneSource())
    path = tmp_path / "avatar.wav"
    recorder = record_avatar(link.remote, None, path)
    await recorder.start()
    assert recorder.recording
    await asyncio.sleep(1.0)  # the scenario: record about a second of the avatar's audio
    await recorder.stop()
    await recorder.stop()  # idempotent
    assert not recorder.recording and not recorder_tasks()
    with wave.open(str(path), "rb") as wav:
        assert wav.getframerate() == SAMPLE_RATE
        assert wav.getsampwidth() == 2
        assert wav.getnframes() > SAMPLE_RATE // 10  # at least 100 ms of audio
    with pytest.raises(AvatarError) as info:
        await recorder.start()
    assert info.value.code is ErrorCode.INVALID_STATE


async def test_recorder_to_mp4_as_context_manager(loopback: Loopback, tmp_path: Path) -> None:
    link = await loopback.connect(ToneSource())
    path = tmp_path / "avatar.mp4"
    async with record_avatar(link.remote, None, path):
        await asyncio.sleep(0.8)  # the scenario: record a moment of the avatar's audio
    assert path.stat().st_size > 1000
    assert not recorder_tasks()


async def test_recorder_refuses_an_unwritable_path(tmp_path: Path) -> None:
    silence = SilenceSource()
    try:
        recorder = record_avatar(silence, None, tmp_path / "missing-dir" / "out.wav")
        with pytest.raises(AvatarError) as info:
            await recorder.start()
        assert info.value.code is ErrorCode.INVALID_ARGUMENT
        await recorder.stop()
    finally:
        silence.stop()


async def test_recorder_setup_failure_logs_a_failing_cleanup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The setup error is raised; the cleanup's own failure is logged, not lost or raised."""

    class BrokenContainer:
        class format:  # stands in for av.ContainerFormat
            name = "wav"

        def add_stream(self, codec: str) -> None:
            raise ValueError("no such codec")

        def close(self) -> None:
            raise OSError("container already gone")

    caplog.set_level(logging.DEBUG, logger="avatar_sdk")
    monkeypatch.setattr("avatar_sdk.media.recorder._open", lambda *a: BrokenContainer())
    silence = SilenceSource()
    try:
        recorder = record_avatar(silence, None, tmp_path / "out.wav")
        with pytest.raises(AvatarError, match="no such codec"):
            await recorder.start()
    finally:
        silence.stop()
    assert any("OSError: container already gone" in r.getMessage() for r in caplog.records)


# --------------------------------------------------------------------------- local sources


async def read(track: MediaStreamTrack, count: int) -> list[av.AudioFrame]:
    frames = []
    for _ in range(count):
        frame = await asyncio.wait_for(track.recv(), 2)
        assert isinstance(frame, av.AudioFrame)
        frames.append(frame)
    return frames


def assert_uplink_format(frames: list[av.AudioFrame], first_pts: int = 0) -> None:
    for index, frame in enumerate(frames):
        assert frame.format.name == "s16" and frame.layout.name == "mono"
        assert frame.sample_rate == SAMPLE_RATE and frame.samples == FRAME_SAMPLES
        assert frame.time_base == fractions.Fraction(1, SAMPLE_RATE)
        assert frame.pts == first_pts + index * FRAME_SAMPLES


@pytest.mark.parametrize("make", [SilenceSource, ToneSource], ids=["silence", "tone"])
async def test_synthetic_sources_are_paced_48k_mono_20ms(
    make: Callable[[], MediaStreamTrack],
) -> None:
    source = make()
    try:
        started = time.monotonic()
        frames = await read(source, 11)
        elapsed = time.monotonic() - started
        assert_uplink_format(frames)  # pts exactly 20 ms of media time apart, from 0
        # No-pacing guard, one-sided: a paced source cannot hand out ten 20 ms intervals in
        # less real time than nine (its schedule starts on the 20 ms grid instant at or before
        # the first frame; a busy machine only makes it longer); an unpaced one takes ~0 s.
        # The schedule itself is pinned on a FakeClock (tests/unit/test_source_pacing.py);
        # how close to real time it keeps is a figure of `make bench` (pacing).
        assert elapsed >= 0.9 * 9 * FRAME_SAMPLES / SAMPLE_RATE
    finally:
        source.stop()
    with pytest.raises(MediaStreamError):
        await source.recv()


async def test_tone_level_and_phase_continuity() -> None:
    tone = ToneSource(1000.0, amplitude=0.5)
    try:
        frames = await read(tone, 3)
    finally:
        tone.stop()
    assert frame_rms(frames[0]) == pytest.approx(0.5 / math.sqrt(2), rel=0.01)
    samples = array("h")
    for frame in frames:
        samples.frombytes(bytes(frame.planes[0])[: FRAME_SAMPLES * 2])
    # No discontinuity at frame edges: consecutive samples differ by at most one step.
    max_step = 0.5 * 32767 * 2 * math.pi * 1000 / SAMPLE_RATE
    assert max(abs(b - a) for a, b in itertools.pairwise(samples)) <= max_step + 2


async def test_a_lagging_consumer_gets_no_burst() -> None:
    source = SilenceSource()
    try:
        await read(source, 1)
        await asyncio.sleep(0.5)  # 25 frames late
        started = time.monotonic()
        frames = await read(source, 4)
        # One-sided: re-anchored on the 20 ms grid instant at or before now, the last three
        # are due 20, 40 and 60 ms after it, so at least 40 ms from now (a burst of the 25
        # overdue frames takes ~0 s). The rule itself: tests/unit/test_source_pacing.py.
        assert time.monotonic() - started >= 0.039
        assert_uplink_format(frames, first_pts=FRAME_SAMPLES)  # the timeline stays continuous
    finally:
        source.stop()


async def test_failing_source_raises_after_its_frames() -> None:
    source = FailingSource(PermissionError("microphone access denied"), after_frames=2)
    frames = await read(source, 2)
    assert_uplink_format(frames)
    for _ in range(2):
        with pytest.raises(PermissionError) as info:
            await source.recv()
        assert classify_device_error(info.value) is ErrorCode.PERMISSION_DENIED
    assert source.failures == 2
    source.stop()
    with pytest.raises(MediaStreamError):
        await source.recv()


# --------------------------------------------------------------------------- files


def write_wav(path: Path, seconds: float, rate: int = 16_000, amplitude: int = 8000) -> None:
    samples = array(
        "h",
        (
            round(amplitude * math.sin(2 * math.pi * 440 * i / rate))
            for i in range(int(seconds * rate))
        ),
    )
    if sys.byteorder == "big":
        samples.byteswap()
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(samples.tobytes())


async def test_file_source_plays_a_wav_to_the_end(tmp_path: Path) -> None:
    path = tmp_path / "hello.wav"
    write_wav(path, 0.3)
    track = file_source(path)
    frames: list[av.AudioFrame] = []
    with pytest.raises(MediaStreamError):
        async with asyncio.timeout(5):
            while True:
                frame = await track.recv()
                assert isinstance(frame, av.AudioFrame)
                frames.append(frame)
    assert 10 <= len(frames) <= 15  # 300 ms of 20 ms frames (the resampler may hold one back)
    assert_uplink_format(frames)
    assert min(frame_rms(f) for f in frames[1:]) > 0.05
    assert track.readyState == "ended"  # released at the end of the file
    assert not [t for t in threading.enumerate() if t.name == "media-player"]


async def test_file_source_loops(tmp_path: Path) -> None:
    path = tmp_path / "short.wav"
    write_wav(path, 0.1)
    track = file_source(str(path), loop=True)
    try:
        frames = await read(track, 12)  # twice the file's length
    finally:
        track.stop()
    assert_uplink_format(frames)
    assert not [t for t in threading.enumerate() if t.name == "media-player"]


async def test_file_source_sent_over_loopback(loopback: Loopback, tmp_path: Path) -> None:
    path = tmp_path / "speech.wav"
    write_wav(path, 2.0)
    link = await loopback.connect(file_source(path))
    async with AudioLevelMeter(link.remote) as meter:
        level = await asyncio.wait_for(meter.wait_for_speech(), 5)
    assert level > 0.05


def write_video_with_audio(path: Path, seconds: float = 0.4) -> None:
    with av.open(str(path), "w") as out:
        video = out.add_stream("mjpeg", rate=25)
        video.width, video.height, video.pix_fmt = 64, 48, "yuvj420p"
        audio = out.add_stream("pcm_s16le", rate=SAMPLE_RATE)
        audio.layout = "mono"
        for i in range(int(seconds * 25)):
            picture = av.VideoFrame(64, 48, "yuvj420p")
            for plane in picture.planes:
                plane.update(bytes(plane.buffer_size))
            picture.pts, picture.time_base = i, fractions.Fraction(1, 25)
            out.mux(video.encode(picture))
        for i in range(int(seconds * 50)):
            sound = av.AudioFrame(format="s16", layout="mono", samples=FRAME_SAMPLES)
            sound.planes[0].update(array("h", [4000, -4000] * (FRAME_SAMPLES // 2)).tobytes())
            sound.sample_rate, sound.pts = SAMPLE_RATE, i * FRAME_SAMPLES
            sound.time_base = fractions.Fraction(1, SAMPLE_RATE)
            out.mux(audio.encode(sound))
        out.mux(video.encode(None))
        out.mux(audio.encode(None))


async def test_file_source_ignores_video(tmp_path: Path) -> None:
    """Guards the private MediaPlayer attributes file_source edits (aiortc is pinned)."""
    path = tmp_path / "clip.mkv"
    write_video_with_audio(path)
    track = file_source(path)
    try:
        player = track._player  # type: ignore[attr-defined]
        assert player.video is None
        assert [s.type for s in player._MediaPlayer__streams] == ["audio"]
        frames = await read(track, 3)
        assert_uplink_format(frames)
        assert frame_rms(frames[0]) > 0.05
    finally:
        track.stop()


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("missing.wav", ErrorCode.DEVICE_NOT_FOUND),
        ("not-media.wav", ErrorCode.INVALID_ARGUMENT),
        ("video-only.mkv", ErrorCode.INVALID_ARGUMENT),
        (".", ErrorCode.INVALID_ARGUMENT),
    ],
)
def test_file_source_refusals(tmp_path: Path, name: str, code: ErrorCode) -> None:
    (tmp_path / "not-media.wav").write_text("this is not audio")
    with av.open(str(tmp_path / "video-only.mkv"), "w") as out:
        video = out.add_stream("mjpeg", rate=25)
        video.width, video.height, video.pix_fmt = 16, 16, "yuvj420p"
        picture = av.VideoFrame(16, 16, "yuvj420p")
        picture.pts = 0
        out.mux(video.encode(picture))
        out.mux(video.encode(None))
    with pytest.raises(AvatarError) as info:
        file_source(tmp_path / name)
    assert info.value.code is code
    if code is ErrorCode.DEVICE_NOT_FOUND:
        assert isinstance(info.value, FileNotFoundError)
        assert classify_device_error(info.value) is code


# --------------------------------------------------------------------------- microphone


class FakePortAudioError(Exception):
    pass


FakePortAudioError.__name__ = "PortAudioError"


class FakeStream:
    """sounddevice.RawInputStream look-alike: a thread calling back with 20 ms blocks."""

    instances: list[FakeStream] = []
    open_error: BaseException | None = None
    start_error: BaseException | None = None
    blocks: int | None = None  # deliver this many blocks, then go quiet (None: forever)
    then_finish = False  # after ``blocks``, report the stream finished (device lost)
    close_error: BaseException | None = None  # close() raises this after releasing

    def __init__(self, **kwargs: Any) -> None:
        error = type(self).open_error
        if error is not None:
            raise error
        self.kwargs = kwargs
        self.closed = False
        self._quit = threading.Event()
        self._thread: threading.Thread | None = None
        type(self).instances.append(self)

    def start(self) -> None:
        error = type(self).start_error
        if error is not None:
            raise error
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        frames, rate = self.kwargs["blocksize"], self.kwargs["samplerate"]
        # 200 Hz: a whole number of periods per 20 ms block, so blocks join seamlessly.
        wave_ = (round(8000 * math.sin(2 * math.pi * 200 * i / rate)) for i in range(frames))
        block = array("h", wave_).tobytes()
        sent = 0
        while not self._quit.wait(0.005) and (self.blocks is None or sent < self.blocks):
            self.kwargs["callback"](block, frames, None, 0)
            sent += 1
        if self.then_finish and not self._quit.is_set():
            self.kwargs["finished_callback"]()

    def close(self, ignore_errors: bool = True) -> None:
        self.closed = True
        self._quit.set()
        if self._thread is not None:
            self._thread.join()
        if type(self).close_error is not None:
            raise type(self).close_error


@pytest.fixture
def fake_sounddevice(monkeypatch: pytest.MonkeyPatch) -> type[FakeStream]:
    """A ``sounddevice`` module whose RawInputStream is a fresh FakeStream subclass."""
    stream_cls = type("RawInputStream", (FakeStream,), {"instances": []})
    module = types.ModuleType("sounddevice")
    module.RawInputStream = stream_cls  # type: ignore[attr-defined]
    module.PortAudioError = FakePortAudioError  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sounddevice", module)
    return stream_cls


@pytest.mark.parametrize("rate", [48_000, 16_000])
async def test_microphone_frames_are_normalized(
    fake_sounddevice: type[FakeStream], rate: int
) -> None:
    mic = MicrophoneSource(device="USB", samplerate=rate)
    assert not fake_sounddevice.instances  # nothing opened until the first recv()
    try:
        frames = await read(mic, 5)
    finally:
        mic.stop()
    (stream,) = fake_sounddevice.instances
    assert stream.kwargs["device"] == "USB" and stream.kwargs["samplerate"] == rate
    assert stream.kwargs["channels"] == 1 and stream.kwargs["dtype"] == "int16"
    assert stream.closed  # stop() released the device
    assert_uplink_format(frames)
    assert frame_rms(frames[-1]) == pytest.approx(8000 / 32768 / math.sqrt(2), rel=0.05)
    with pytest.raises(MediaStreamError):
        await mic.recv()


@pytest.mark.parametrize(
    ("error", "exc_type"),
    [
        (
            FakePortAudioError("Error opening RawInputStream: Invalid device", -9996),
            DeviceNotFoundError,
        ),
        (
            FakePortAudioError("Error opening RawInputStream: Device unavailable", -9985),
            DeviceBusyError,
        ),
        (FakePortAudioError("Error querying device -1"), DeviceNotFoundError),
        (ValueError("No input device matching 'USB'"), DeviceNotFoundError),
        (PermissionError(errno.EACCES, "denied"), DevicePermissionError),
        (OSError(errno.EBUSY, "Device or resource busy"), DeviceBusyError),
    ],
)
async def test_microphone_open_failures_are_mapped(
    fake_sounddevice: type[FakeStream], error: BaseException, exc_type: type[AvatarError]
) -> None:
    fake_sounddevice.open_error = error
    mic = MicrophoneSource(device="USB")
    with pytest.raises(exc_type) as info:
        await mic.recv()
    assert info.value.__cause__ is error
    assert classify_device_error(info.value) is info.value.code
    assert mic.readyState == "ended"
    with pytest.raises(MediaStreamError):
        await mic.recv()


async def test_microphone_start_failure_closes_the_stream(
    fake_sounddevice: type[FakeStream],
) -> None:
    fake_sounddevice.start_error = FakePortAudioError("Error starting stream: Device unavailable")
    mic = MicrophoneSource()
    with pytest.raises(DeviceBusyError):
        await mic.recv()
    (stream,) = fake_sounddevice.instances
    assert stream.closed


async def test_microphone_close_failures_are_logged_not_raised(
    fake_sounddevice: type[FakeStream], caplog: pytest.LogCaptureFixture
) -> None:
    """Closing PortAudio may fail; teardown goes on and the failure is in the log."""
    caplog.set_level(logging.DEBUG, logger="avatar_sdk")
    fake_sounddevice.close_error = FakePortAudioError("Error closing stream")
    mic = MicrophoneSource()
    await read(mic, 2)
    mic.stop()  # must not raise
    assert mic.readyState == "ended" and fake_sounddevice.instances[0].closed
    fake_sounddevice.start_error = FakePortAudioError("Error starting stream: Device unavailable")
    with pytest.raises(DeviceBusyError):  # the start failure, not the close failure
        await MicrophoneSource().recv()
    swallowed = [r.getMessage() for r in caplog.records if "best effort" in r.getMessage()]
    assert len(swallowed) == 2
    assert all("PortAudioError: Error closing stream" in m for m in swallowed)


async def test_microphone_stall_is_a_busy_device(fake_sounddevice: type[FakeStream]) -> None:
    fake_sounddevice.blocks = 3
    mic = MicrophoneSource(stall_timeout=0.2)
    await read(mic, 3)
    with pytest.raises(DeviceBusyError):
        await asyncio.wait_for(mic.recv(), 2)
    assert fake_sounddevice.instances[0].closed


async def test_microphone_lost_device_is_not_found(fake_sounddevice: type[FakeStream]) -> None:
    fake_sounddevice.blocks = 3
    fake_sounddevice.then_finish = True
    mic = MicrophoneSource(stall_timeout=None)
    await read(mic, 3)
    with pytest.raises(DeviceNotFoundError):
        await asyncio.wait_for(mic.recv(), 2)
    assert fake_sounddevice.instances[0].closed


async def test_microphone_drops_oldest_when_the_consumer_lags(
    fake_sounddevice: type[FakeStream],
) -> None:
    mic = MicrophoneSource(max_queue=4)
    try:
        await read(mic, 1)
        # Not reading: the fake delivers a block every ~5 ms, soon more than the queue holds.
        assert await until(lambda: mic.dropped > 0, 2)
        await read(mic, 4)
    finally:
        mic.stop()


# --------------------------------------------------------------------------- iterator


class CountingTrack(MediaStreamTrack):
    """``count`` numbered frames as fast as the loop allows, then an end or an error."""

    kind = "audio"

    def __init__(self, count: int, error: BaseException | None = None) -> None:
        super().__init__()
        self.count, self.error, self.sent = count, error, 0
        self.exhausted = asyncio.Event()

    async def recv(self) -> av.AudioFrame:
        await asyncio.sleep(0)
        if self.sent == self.count:
            self.exhausted.set()
            if self.error is not None:
                raise self.error
            raise MediaStreamError
        frame = av.AudioFrame(format="s16", layout="mono", samples=FRAME_SAMPLES)
        frame.pts, self.sent = self.sent, self.sent + 1
        return frame


async def test_frame_iterator_drops_the_oldest_for_a_slow_consumer() -> None:
    track = CountingTrack(50)
    async with FrameIterator(track, max_queue=3) as iterator:
        first = await iterator.__anext__()
        await asyncio.wait_for(track.exhausted.wait(), 2)  # the producer ran to the end
        assert iterator.closed
        rest = [frame async for frame in iterator]
    assert first.pts == 0
    assert [f.pts for f in rest] == [47, 48, 49]  # the newest survive
    assert iterator.received == 50 and iterator.dropped == 46


async def test_frame_iterator_raises_a_track_error_after_the_frames() -> None:
    track = CountingTrack(2, error=RuntimeError("decoder broke"))
    iterator = FrameIterator(track)
    frames = [await iterator.__anext__(), await iterator.__anext__()]
    with pytest.raises(RuntimeError, match="decoder broke"):
        await iterator.__anext__()
    with pytest.raises(StopAsyncIteration):
        await iterator.__anext__()
    await iterator.aclose()
    assert [f.pts for f in frames] == [0, 1]


async def test_frame_iterator_aclose_stops_reading_but_not_the_track() -> None:
    source = SilenceSource()
    iterator = FrameIterator(source)
    await iterator.__anext__()
    waiter = asyncio.ensure_future(iterator.__anext__())
    await asyncio.sleep(0)
    await iterator.aclose()
    await iterator.aclose()  # idempotent
    with contextlib.suppress(StopAsyncIteration):
        await asyncio.wait_for(waiter, 1)
    assert waiter.done()
    assert iterator.closed and not recorder_tasks()
    assert source.readyState == "live"
    with pytest.raises(StopAsyncIteration):
        await iterator.__anext__()
    source.stop()
