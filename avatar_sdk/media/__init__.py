"""Audio sources and sinks for bots: what the avatar hears, and what it says back.

Sources are aiortc ``MediaStreamTrack`` objects for ``AvatarSession(audio=...)`` and
``switch_audio()``: :class:`SilenceSource`, :class:`ToneSource`, :func:`file_source`,
:class:`MicrophoneSource` (``pip install avatar-sdk[mic]``) and :class:`FailingSource`
(tests); pre-encoded Opus, sent as it is: :class:`OpusFileSource`,
:class:`EncodedSilenceSource` and :class:`EncodedToneSource`. Sinks read
``session.avatar_audio`` / ``avatar_video``: :class:`FrameIterator`,
:class:`AudioLevelMeter` and :func:`record_avatar`. Device failures map to public codes
through :func:`classify_device_error`.
"""

from .devices import (
    DEVICE_CODES,
    DeviceBusyError,
    DeviceNotFoundError,
    DevicePermissionError,
    classify_device_error,
    device_error,
)
from .echo import EchoCanceller, EchoStats
from .encoded import EncodedSilenceSource, EncodedToneSource, OpusFileSource
from .levels import frame_rms
from .sinks import AudioLevelMeter, FrameIterator, Recorder, record_avatar
from .sources import (
    FRAME_SAMPLES,
    FRAME_SECONDS,
    SAMPLE_RATE,
    TIME_BASE,
    FailingSource,
    MicrophoneSource,
    SilenceSource,
    ToneSource,
    file_source,
)
from .speaker import SpeakerSink
from .voice import CleanedSource, LocalVoice

__all__ = [
    "DEVICE_CODES",
    "FRAME_SAMPLES",
    "FRAME_SECONDS",
    "SAMPLE_RATE",
    "TIME_BASE",
    "AudioLevelMeter",
    "CleanedSource",
    "DeviceBusyError",
    "DeviceNotFoundError",
    "DevicePermissionError",
    "EchoCanceller",
    "EchoStats",
    "EncodedSilenceSource",
    "EncodedToneSource",
    "FailingSource",
    "FrameIterator",
    "LocalVoice",
    "MicrophoneSource",
    "OpusFileSource",
    "Recorder",
    "SilenceSource",
    "SpeakerSink",
    "ToneSource",
    "classify_device_error",
    "device_error",
    "file_source",
    "frame_rms",
    "record_avatar",
]
