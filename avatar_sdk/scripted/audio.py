"""What ``say`` sends: the caller's audio as mp3 bytes, and its duration.

The service takes mp3 (the one verified format) and does not probe it: the duration is the
caller's to send. :func:`prepare` accepts mp3 bytes as they are, WAV bytes, int16 PCM
(numpy, with its sample rate) or a sequence of ``av.AudioFrame``; anything but mp3 is
encoded with PyAV's mp3 encoder (libmp3lame). The duration is measured by decoding the mp3
when the caller does not give it. CPU work only (no I/O): the session runs it in a thread.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass

import av
import numpy as np

from ..errors import AvatarError, ErrorCode

__all__ = [
    "MAX_AUDIO_BYTES",
    "PreparedAudio",
    "decode_pcm",
    "encode_mp3",
    "pcm_tone",
    "prepare",
]

#: Largest encoded utterance sent in one ``say`` (bytes): a bound, not a service limit.
MAX_AUDIO_BYTES = 20 * 1024 * 1024
#: Longest utterance accepted (seconds).
MAX_DURATION = 600.0
_MP3_RATE = 48_000

AudioInput = bytes | bytearray | memoryview | np.ndarray | Sequence[av.AudioFrame]


@dataclass(frozen=True, slots=True)
class PreparedAudio:
    """mp3 bytes ready to upload and their measured duration (seconds)."""

    mp3: bytes
    duration: float


def is_mp3(data: bytes) -> bool:
    """An ID3 tag or an MPEG audio frame sync at the start."""
    return data[:3] == b"ID3" or (len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0)


def is_wav(data: bytes) -> bool:
    return data[:4] == b"RIFF" and data[8:12] == b"WAVE"


def decode_pcm(data: bytes, rate: int = _MP3_RATE) -> np.ndarray:
    """Decode encoded audio (mp3, WAV, anything FFmpeg reads) to mono int16 at ``rate``.

    Raises ``AvatarError(INVALID_ARGUMENT)`` when it is not decodable audio."""
    chunks: list[np.ndarray] = []
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            if not container.streams.audio:
                raise AvatarError(ErrorCode.INVALID_ARGUMENT, "the audio has no audio stream")
            stream = container.streams.audio[0]
            resampler = av.AudioResampler(format="s16", layout="mono", rate=rate)
            for frame in container.decode(stream):
                for out in resampler.resample(frame):
                    chunks.append(out.to_ndarray().reshape(-1).copy())
            for out in resampler.resample(None):
                chunks.append(out.to_ndarray().reshape(-1).copy())
    except AvatarError:
        raise
    except (av.FFmpegError, ValueError, OSError) as exc:
        raise AvatarError(
            ErrorCode.INVALID_ARGUMENT, f"not decodable audio ({type(exc).__name__})"
        ) from None
    if not chunks:
        return np.zeros(0, dtype=np.int16)
    return np.concatenate(chunks).astype(np.int16, copy=False)


def _frames_to_pcm(frames: Sequence[av.AudioFrame], rate: int) -> np.ndarray:
    resampler = av.AudioResampler(format="s16", layout="mono", rate=rate)
    chunks: list[np.ndarray] = []
    for frame in frames:
        if not isinstance(frame, av.AudioFrame):
            raise AvatarError(
                ErrorCode.INVALID_ARGUMENT,
                f"audio frames must be av.AudioFrame, not {type(frame).__name__}",
            )
        for out in resampler.resample(frame):
            chunks.append(out.to_ndarray().reshape(-1).copy())
    for out in resampler.resample(None):
        chunks.append(out.to_ndarray().reshape(-1).copy())
    return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int16)


def _resample(pcm: np.ndarray, rate: int, target: int) -> np.ndarray:
    """Mono int16 ``pcm`` at ``rate`` to ``target`` Hz (PyAV's resampler)."""
    if rate == target:
        return pcm
    frame = av.AudioFrame.from_ndarray(pcm.reshape(1, -1), format="s16", layout="mono")
    frame.sample_rate = rate
    resampler = av.AudioResampler(format="s16", layout="mono", rate=target)
    chunks = [f.to_ndarray().reshape(-1) for f in resampler.resample(frame)]
    chunks += [f.to_ndarray().reshape(-1) for f in resampler.resample(None)]
    return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int16)


def encode_mp3(pcm: np.ndarray, rate: int, *, bitrate: int = 96_000) -> bytes:
    """Mono int16 ``pcm`` at ``rate`` as mp3 bytes (libmp3lame through PyAV)."""
    pcm = _resample(np.ascontiguousarray(pcm, dtype=np.int16).reshape(-1), rate, _MP3_RATE)
    out = io.BytesIO()
    with av.open(out, mode="w", format="mp3") as container:
        stream = container.add_stream("libmp3lame", rate=_MP3_RATE)
        stream.layout = "mono"
        stream.bit_rate = bitrate
        step = 1152 * 4
        for start in range(0, len(pcm), step):
            chunk = pcm[start : start + step]
            frame = av.AudioFrame.from_ndarray(chunk.reshape(1, -1), format="s16", layout="mono")
            frame.sample_rate = _MP3_RATE
            frame.pts = start
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return out.getvalue()


def _pcm_of(audio: object, sample_rate: int | None) -> tuple[np.ndarray, int]:
    if isinstance(audio, np.ndarray):
        if (
            sample_rate is None
            or isinstance(sample_rate, bool)
            or not 8000 <= sample_rate <= 192_000
        ):
            raise AvatarError(
                ErrorCode.INVALID_ARGUMENT, "PCM audio needs sample_rate (8000-192000 Hz)"
            )
        if audio.dtype != np.int16:
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "PCM audio must be int16 samples")
        samples: np.ndarray = audio
        if samples.ndim == 2:  # (samples, channels) or (channels, samples): mixed to mono
            axis = 1 if samples.shape[0] >= samples.shape[1] else 0
            samples = samples.astype(np.int32).mean(axis=axis).astype(np.int16)
        elif samples.ndim != 1:
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "PCM audio must be 1- or 2-D")
        return samples, int(sample_rate)
    if isinstance(audio, Sequence) and not isinstance(audio, str | bytes | bytearray):
        return _frames_to_pcm(audio, _MP3_RATE), _MP3_RATE
    raise AvatarError(
        ErrorCode.INVALID_ARGUMENT,
        "audio must be mp3 or WAV bytes, int16 PCM (numpy) or a sequence of av.AudioFrame,"
        f" not {type(audio).__name__}",
    )


def _checked(duration: float) -> float:
    if not (math.isfinite(duration) and 0 < duration <= MAX_DURATION):
        raise AvatarError(
            ErrorCode.INVALID_ARGUMENT,
            f"the audio lasts {duration:.3g}s (must be 0-{MAX_DURATION:g}s)",
        )
    return duration


def prepare(audio: object, duration: float | None, sample_rate: int | None = None) -> PreparedAudio:
    """The mp3 to upload and its duration (``duration`` if given, else measured).

    Raises ``AvatarError``: ``invalid_argument`` for audio that cannot be used,
    ``media_failed`` when PyAV cannot encode it (an FFmpeg build without libmp3lame)."""
    try:
        return _prepare(audio, duration, sample_rate)
    except AvatarError:
        raise
    except (av.FFmpegError, ValueError, TypeError, OSError) as exc:
        raise AvatarError(
            ErrorCode.MEDIA_FAILED, f"audio could not be converted to mp3 ({type(exc).__name__})"
        ) from None


def _prepare(audio: object, duration: float | None, sample_rate: int | None) -> PreparedAudio:
    if duration is not None:
        if isinstance(duration, bool) or not isinstance(duration, int | float):
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "duration must be seconds (a number)")
        _checked(float(duration))
    if isinstance(audio, bytes | bytearray | memoryview):
        data = bytes(audio)
        if not data:
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "the audio is empty")
        if len(data) > MAX_AUDIO_BYTES:
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "the audio is larger than 20 MiB")
        if is_mp3(data):
            if duration is not None:
                return PreparedAudio(data, float(duration))
            pcm = decode_pcm(data)
            return PreparedAudio(data, _checked(len(pcm) / _MP3_RATE))
        if not is_wav(data):
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "audio bytes must be mp3 or WAV")
        pcm, rate = decode_pcm(data), _MP3_RATE
    else:
        pcm, rate = _pcm_of(audio, sample_rate)
    if not len(pcm):
        raise AvatarError(ErrorCode.INVALID_ARGUMENT, "the audio has no samples")
    measured = _checked(len(pcm) / rate)
    return PreparedAudio(
        encode_mp3(pcm, rate), float(duration) if duration is not None else measured
    )


def pcm_tone(
    frequency: float, seconds: float, rate: int = 48_000, amplitude: float = 0.3
) -> np.ndarray:
    """int16 mono samples of a sine (for examples and tests of ``say``)."""
    t = np.arange(int(seconds * rate)) / rate
    return (np.sin(2 * np.pi * frequency * t) * amplitude * 32767).astype(np.int16)
