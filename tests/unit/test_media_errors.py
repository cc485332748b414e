"""Pure: audio device failures → public codes, and the media package's argument checks."""

from __future__ import annotations

import errno
import math
import pickle
import sys
from array import array

import av
import pytest
from aiortc import VideoStreamTrack

from avatar_sdk import AvatarError, ErrorCode
from avatar_sdk.media import (
    DEVICE_CODES,
    AudioLevelMeter,
    DeviceBusyError,
    DeviceNotFoundError,
    DevicePermissionError,
    FrameIterator,
    MicrophoneSource,
    SilenceSource,
    ToneSource,
    classify_device_error,
    device_error,
    frame_rms,
    record_avatar,
)


class PortAudioError(Exception):
    """Stand-in for ``sounddevice.PortAudioError`` (matched by class name, never imported)."""


class HostPortAudioError(PortAudioError):
    """Subclasses of it classify the same way."""


NF, BUSY, PERM = ErrorCode.DEVICE_NOT_FOUND, ErrorCode.DEVICE_BUSY, ErrorCode.PERMISSION_DENIED


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (PermissionError("mic blocked by the OS"), PERM),
        (OSError(errno.EACCES, "Permission denied"), PERM),  # Python makes it PermissionError
        (OSError(errno.EPERM, "Operation not permitted"), PERM),
        (FileNotFoundError("/dev/snd/pcmC9D0c"), NF),
        (OSError(errno.ENOENT, "No such file or directory"), NF),
        (OSError(errno.ENODEV, "No such device"), NF),
        (OSError(errno.ENXIO, "No such device or address"), NF),
        (OSError(errno.EBUSY, "Device or resource busy"), BUSY),
        (OSError(errno.EIO, "Input/output error"), BUSY),
        (OSError("no errno at all"), BUSY),
        (BlockingIOError(errno.EAGAIN, "try again"), BUSY),
        (PortAudioError("Error opening RawInputStream: Invalid device", -9996), NF),
        (PortAudioError("Error querying device -1"), NF),
        (PortAudioError("Input device not found"), NF),
        (PortAudioError("Error starting stream: Device unavailable", -9985), BUSY),
        (PortAudioError("Unanticipated host error", -9999, (0, -13, "")), BUSY),
        (PortAudioError("ALSA: permission denied opening hw:0"), PERM),
        (HostPortAudioError("Invalid device"), NF),
        (PortAudioError(), BUSY),
        (AvatarError(ErrorCode.DEVICE_BUSY, "x"), BUSY),
        (AvatarError(ErrorCode.PERMISSION_DENIED), PERM),
        (AvatarError(ErrorCode.CONNECT_TIMEOUT), None),
        (RuntimeError("codec exploded"), None),
        (ValueError("No input device matching 'usb'"), None),
        (KeyboardInterrupt(), None),
        (Exception("Invalid device"), None),  # the message alone is not enough
    ],
    ids=repr,
)
def test_classify_device_error(exc: BaseException, code: ErrorCode | None) -> None:
    assert classify_device_error(exc) == code


@pytest.mark.parametrize(
    ("code", "cls", "builtin", "err_no"),
    [
        (NF, DeviceNotFoundError, FileNotFoundError, errno.ENODEV),
        (BUSY, DeviceBusyError, OSError, errno.EBUSY),
        (PERM, DevicePermissionError, PermissionError, errno.EACCES),
    ],
)
def test_device_errors_are_avatar_errors_and_builtins(
    code: ErrorCode, cls: type[AvatarError], builtin: type[OSError], err_no: int
) -> None:
    err = device_error(code, "PortAudioError: Invalid device")
    assert type(err) is cls
    assert isinstance(err, AvatarError) and isinstance(err, builtin)
    assert err.code is code and err.errno == err_no
    assert err.as_event()["code"] == str(code)
    assert str(code) in str(err) and "Invalid device" in str(err)
    # Whoever classifies it (by code or by built-in type) gets the same answer.
    assert classify_device_error(err) is code
    copy = pickle.loads(pickle.dumps(err))
    assert type(copy) is cls and copy.code is code and copy.detail == err.detail


def test_device_codes_are_the_contract_three() -> None:
    assert {str(c) for c in DEVICE_CODES} == {
        "device_not_found",
        "device_busy",
        "permission_denied",
    }
    assert type(device_error(ErrorCode.GAVE_UP)) is AvatarError


def test_microphone_without_sounddevice_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "sounddevice", None)  # makes the import fail
    with pytest.raises(AvatarError) as info:
        MicrophoneSource()
    assert info.value.code is ErrorCode.DEVICE_NOT_FOUND
    assert "avatar-sdk[mic]" in str(info.value)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"frequency": 0.0},
        {"frequency": -5.0},
        {"frequency": 24_000.0},
        {"frequency": math.nan},
        {"amplitude": 1.5},
        {"amplitude": -0.1},
        {"amplitude": math.inf},
    ],
)
def test_tone_rejects_bad_arguments(kwargs: dict[str, float]) -> None:
    with pytest.raises(AvatarError) as info:
        ToneSource(**kwargs)
    assert info.value.code is ErrorCode.INVALID_ARGUMENT


def test_sink_arguments_are_checked() -> None:
    silence, video = SilenceSource(), VideoStreamTrack()
    try:
        with pytest.raises(AvatarError) as info:
            record_avatar(None, None, "out.wav")
        assert info.value.code is ErrorCode.INVALID_ARGUMENT
        with pytest.raises(AvatarError) as info:
            FrameIterator(silence, max_queue=0)
        assert info.value.code is ErrorCode.INVALID_ARGUMENT
        with pytest.raises(AvatarError) as info:
            AudioLevelMeter(video)
        assert info.value.code is ErrorCode.INVALID_ARGUMENT
    finally:
        silence.stop()
        video.stop()


def _frame(values: list[int], *, layout: str = "mono", fmt: str = "s16") -> av.AudioFrame:
    channels = 2 if layout == "stereo" else 1
    frame = av.AudioFrame(format=fmt, layout=layout, samples=len(values) // channels)
    frame.planes[0].update(array("h", values).tobytes())
    frame.sample_rate = 48_000
    return frame


def test_frame_rms_is_relative_to_full_scale() -> None:
    assert frame_rms(_frame([0] * 960)) == 0.0
    assert frame_rms(_frame([16384, -16384] * 480)) == pytest.approx(0.5)
    # Interleaved stereo: both channels count.
    assert frame_rms(_frame([32767, 0] * 480, layout="stereo")) == pytest.approx(
        math.sqrt(0.5), rel=1e-3
    )


def test_frame_rms_reads_float_and_other_formats() -> None:
    flt = av.AudioFrame(format="fltp", layout="stereo", samples=4)
    for plane in flt.planes:
        plane.update(array("f", [0.5, -0.5, 0.5, -0.5]).tobytes())
    flt.sample_rate = 48_000
    assert frame_rms(flt) == pytest.approx(0.5)
    u8 = av.AudioFrame(format="u8", layout="mono", samples=960)
    u8.planes[0].update(bytes([128]) * 960)  # unsigned silence
    u8.sample_rate = 48_000
    assert frame_rms(u8) == pytest.approx(0.0, abs=1e-3)
