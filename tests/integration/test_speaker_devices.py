"""The speaker's device failures carry the microphone's public codes, and a session that
closes while the speaker and the microphone are open leaves nothing behind: no task, no
PortAudio stream, no file descriptor (the last over the PulseAudio rig)."""

from __future__ import annotations

import asyncio
import errno
import os
import sys
import threading
import types
from collections.abc import Iterator
from typing import Any

import av
import numpy as np
import pytest
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from avatar_sdk import AvatarError, AvatarSession
from avatar_sdk.media import (
    DeviceBusyError,
    DeviceNotFoundError,
    DevicePermissionError,
    LocalVoice,
    SpeakerSink,
    classify_device_error,
)
from avatar_sdk.testing import StagingServer
from avatar_sdk.testing.audio_rig import AudioRig, audio_rig_missing
from avatar_sdk.testing.leaks import LeakCheck

from .conftest import FAST, until


class FakePortAudioError(Exception):
    """Stand-in for ``sounddevice.PortAudioError`` (matched by class name)."""


FakePortAudioError.__name__ = "PortAudioError"


class FakeOutput:
    """sounddevice.RawOutputStream look-alike: a thread asking for 10 ms blocks."""

    instances: list[FakeOutput] = []
    open_error: BaseException | None = None
    start_error: BaseException | None = None
    blocks: int | None = None  # ask for this many blocks, then finish (the device is lost)
    latency = 0.01

    def __init__(self, **kwargs: Any) -> None:
        if type(self).open_error is not None:
            raise type(self).open_error
        self.kwargs = kwargs
        self.closed = False
        self.played = bytearray()
        self._quit = threading.Event()
        self._thread: threading.Thread | None = None
        type(self).instances.append(self)

    def start(self) -> None:
        if type(self).start_error is not None:
            raise type(self).start_error
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        frames = self.kwargs["blocksize"]
        asked = 0
        while not self._quit.wait(0.005):
            if self.blocks is not None and asked >= self.blocks:
                self.kwargs["finished_callback"]()
                return
            out = bytearray(frames * 2)
            self.kwargs["callback"](out, frames, None, 0)
            self.played += out
            asked += 1

    def close(self, ignore_errors: bool = True) -> None:
        self.closed = True
        self._quit.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self.kwargs["finished_callback"]()  # PortAudio calls it on a close, too


@pytest.fixture
def fake_output(monkeypatch: pytest.MonkeyPatch) -> type[FakeOutput]:
    stream_cls = type("RawOutputStream", (FakeOutput,), {"instances": []})
    module = types.ModuleType("sounddevice")
    module.RawOutputStream = stream_cls  # type: ignore[attr-defined]
    module.PortAudioError = FakePortAudioError  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sounddevice", module)
    return stream_cls


class Tone(MediaStreamTrack):
    """20 ms frames of a 440 Hz tone, paced like a received track; ends after ``count``."""

    kind = "audio"

    def __init__(self, count: int | None = None) -> None:
        super().__init__()
        self.count, self.sent = count, 0

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live" or (self.count is not None and self.sent >= self.count):
            raise MediaStreamError
        await asyncio.sleep(0.02)
        t = (np.arange(960) + 960 * self.sent) / 48000
        pcm = (8000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16).reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(pcm, format="s16", layout="mono")
        frame.sample_rate, frame.pts, self.sent = 48000, 960 * self.sent, self.sent + 1
        return frame


@pytest.mark.parametrize(
    ("error", "exc_type"),
    [
        (FakePortAudioError("Error opening RawOutputStream: Invalid device", -9996),
         DeviceNotFoundError),
        (FakePortAudioError("Error querying device -1"), DeviceNotFoundError),  # no default
        (ValueError("No output device matching 'USB'"), DeviceNotFoundError),
        (FakePortAudioError("Error opening RawOutputStream: Device unavailable", -9985),
         DeviceBusyError),
        (OSError(errno.EBUSY, "Device or resource busy"), DeviceBusyError),
        (FakePortAudioError("ALSA: permission denied opening hw:0"), DevicePermissionError),
        (PermissionError(errno.EACCES, "denied"), DevicePermissionError),
    ],
)  # fmt: skip
async def test_an_output_that_cannot_open_has_the_microphones_code(
    fake_output: type[FakeOutput], error: BaseException, exc_type: type[AvatarError]
) -> None:
    fake_output.open_error = error
    sink = SpeakerSink("USB")
    with pytest.raises(exc_type) as info:
        await sink.start(Tone())
    assert info.value.__cause__ is error
    assert classify_device_error(info.value) is info.value.code
    assert not sink.running


async def test_an_output_that_fails_to_start_is_closed(fake_output: type[FakeOutput]) -> None:
    fake_output.start_error = FakePortAudioError("Error starting stream: Device unavailable")
    sink = SpeakerSink()
    with pytest.raises(DeviceBusyError):
        await sink.start(Tone())
    (stream,) = fake_output.instances
    assert stream.closed and not sink.running


async def test_an_output_lost_while_playing_is_not_found_and_released(
    fake_output: type[FakeOutput],
) -> None:
    fake_output.blocks = 5
    released: list[bool] = []
    sink = SpeakerSink()
    sink.on_released = lambda: released.append(True)
    before = LeakCheck()
    await sink.start(Tone())
    async with asyncio.timeout(5):
        await sink.released.wait()
    assert isinstance(sink.failure, DeviceNotFoundError)
    assert released == [True] and not sink.running
    assert fake_output.instances[0].closed
    assert await before.settle(2.0) == []  # the reader is gone too


async def test_the_speaker_is_released_when_its_track_ends(fake_output: type[FakeOutput]) -> None:
    """``session.avatar_audio`` ends only when the session closes: the device goes with it."""
    before = LeakCheck()
    sink = SpeakerSink()
    await sink.start(Tone(count=5))
    async with asyncio.timeout(5):
        await sink.released.wait()
    assert sink.failure is None and not sink.running and fake_output.instances[0].closed
    assert await before.settle(2.0) == []
    await sink.stop()  # still fine afterwards


# -- over the PulseAudio rig ---------------------------------------------------------------
_missing = audio_rig_missing()


@pytest.fixture
def rig() -> Iterator[AudioRig]:
    if _missing is not None:
        pytest.skip(f"no audio rig: {_missing}")
    pytest.importorskip("livekit.rtc", reason="the voice extra (livekit) is not installed")
    with AudioRig() as running:
        yield running


def _open_fds() -> set[int]:
    return {int(fd) for fd in os.listdir("/proc/self/fd")}


def _open_streams() -> list[Any]:
    import gc  # noqa: PLC0415

    import sounddevice as sd  # noqa: PLC0415

    kinds = (sd.RawInputStream, sd.RawOutputStream)
    return [o for o in gc.get_objects() if isinstance(o, kinds) and not o.closed]


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
@pytest.mark.xdist_group("audio_rig")
@pytest.mark.timeout(60)
async def test_a_session_closed_with_the_devices_open_leaves_nothing(rig: AudioRig) -> None:
    async with StagingServer() as staging:
        warm = LocalVoice(input="pulse", output="pulse")  # PortAudio's own first-use state
        await warm.start(None)
        await warm.stop()
        check, fds = LeakCheck(), _open_fds()
        voice = LocalVoice(input="pulse", output="pulse")
        session = AvatarSession(
            staging.url, staging.token, audio=voice.microphone, video=False,
            allow_insecure_transport=True, config=FAST.with_(overall_connect_timeout=10.0),
        )  # fmt: skip
        await session.connect()
        await voice.start(session.avatar_audio)
        assert await until(lambda: voice.speaker.played > 48000 // 2, 10)
        assert len(_open_streams()) == 2  # the microphone and the speaker, playing
        await session.close()  # no voice.stop(): the devices go with the session
        assert await until(lambda: not _open_streams(), 5), _open_streams()
        assert await check.settle(2.0) == []
        assert await until(lambda: _open_fds() <= fds, 5), sorted(_open_fds() - fds)
        await voice.stop()


class ManualOutput:
    """RawOutputStream stand-in the test drives: ``pull()`` is the device asking for a block."""

    instances: list[ManualOutput] = []
    latency = 0.01

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        type(self).instances.append(self)

    def start(self) -> None:
        pass

    def pull(self) -> np.ndarray:
        frames = self.kwargs["blocksize"]
        out = bytearray(frames * 2)
        self.kwargs["callback"](out, frames, None, 0)
        return np.frombuffer(bytes(out), dtype=np.int16)

    def close(self, ignore_errors: bool = True) -> None:
        pass


def _frame(value: int) -> av.AudioFrame:
    frame = av.AudioFrame.from_ndarray(
        np.full((1, 960), value, dtype=np.int16), format="s16", layout="mono"
    )
    frame.sample_rate = 48000
    return frame


async def test_a_late_frame_does_not_leave_a_lasting_backlog(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A late frame makes the device underrun; everything after it then waits that much
    longer in the buffer, for as long as frames and device keep step. The sink trims the
    backlog back to one output buffer in the avatar's silence, never in its voice."""
    module = types.ModuleType("sounddevice")
    module.RawOutputStream = type("RawOutputStream", (ManualOutput,), {"instances": []})  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sounddevice", module)
    sink = SpeakerSink()
    await sink.start()
    (device,) = module.RawOutputStream.instances  # type: ignore[attr-defined]

    def step(value: int, frames: int) -> None:  # frames of 20 ms, two 10 ms pulls each
        for _ in range(frames):
            sink.write(_frame(value))
            device.pull()
            device.pull()

    step(5000, 10)
    assert sink.buffered == 0.0
    device.pull()  # the next frame is late: the device underruns, twice
    device.pull()
    sink.write(_frame(5000))
    sink.write(_frame(5000))  # ... and comes with the one after it
    step(5000, 50)  # a second of voice: the backlog stays (trimming it would click)
    assert sink.buffered == pytest.approx(0.04) and sink.trimmed == 0
    step(0, 50)  # a second of silence: trimmed to one output buffer at most
    assert sink.buffered <= 0.01 and sink.trimmed > 0
    await sink.stop()
