"""``avatar-sdk talk --voice``: a spoken conversation in the terminal.

The microphone goes up through the echo canceller, the avatar's voice plays on the speaker
(:class:`~avatar_sdk.media.LocalVoice`), its words print as captions and the user's speech
prints as the service transcribes it (``you (heard):``). Everything else is ``talk``'s run
(:class:`.talk.Talk`): the connect and its retries, Ctrl-C, the close that completes the
thread, and the exit codes. The devices are checked before connecting, so a missing, busy
or refused device is one line and exit 3 without a server session; a device lost during
the conversation ends it with its code too.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import sys
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from ..errors import AvatarError, ErrorCode
from ..events.bus import Event
from ..media.devices import DEVICE_CODES, device_error
from ..media.speaker import RATE, import_sounddevice, map_device_failure
from ..media.voice import LocalVoice
from . import exits, interrupts
from .messages import error_line
from .talk import Talk, TalkOptions

if TYPE_CHECKING:
    from aiortc.mediastreams import MediaStreamTrack

    from ..session.facade import AvatarSession

__all__ = ["VoiceOptions", "VoiceTalk", "device_choice", "list_devices", "talk_by_voice"]


@dataclass(frozen=True, slots=True)
class VoiceOptions:
    """The devices of ``--voice`` (None: the system's default) and the canceller."""

    input: int | str | None = None
    output: int | str | None = None
    echo_cancellation: bool = True


def device_choice(text: str | None) -> int | str | None:
    """``--input``/``--output``: an index when all digits, else a name (a substring)."""
    if text is None or not text.strip():
        return None
    return int(text) if text.strip().isdigit() else text


def list_devices(out: IO[str] | None = None) -> int:
    """``--list-devices``: one line per device, ``>`` the default input, ``<`` the default
    output; the exit code (3 when PortAudio cannot list them)."""
    out = out or sys.stdout
    quiet_alsa()
    try:
        sd = import_sounddevice()
        devices = list(sd.query_devices())
        default_in, default_out = (int(i) for i in sd.default.device)
    except Exception as exc:  # no sounddevice/PortAudio, or PortAudio failed to enumerate
        failure = exc if isinstance(exc, AvatarError) else map_device_failure(exc, opening=False)
        print(f"avatar-sdk: {error_line(failure)}", file=sys.stderr)
        return exits.for_error(failure)
    if not devices:
        print("no audio devices", file=out)
    for index, device in enumerate(devices):
        ins, outs = int(device["max_input_channels"]), int(device["max_output_channels"])
        mark = (">" if index == default_in else " ") + ("<" if index == default_out else " ")
        print(f"{mark} {index:>3}  {device['name']}  ({ins} in, {outs} out)", file=out)
    print("> default input, < default output; pick with --input/--output INDEX|NAME", file=out)
    return exits.OK


#: libasound's error handler signature (its variadic tail is never read here).
_ALSA_HANDLER = ctypes.CFUNCTYPE(
    None, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p
)
_alsa_quiet: list[object] = []  # the handler, kept alive while libasound may call it


def quiet_alsa() -> None:
    """libasound writes its own diagnostics ("ALSA lib pcm.c: underrun occurred") to the
    terminal, between the captions; the command says what matters itself. Kept with
    ``--verbose``. Nothing happens where there is no libasound (macOS, Windows)."""
    if _alsa_quiet or logging.getLogger("avatar_sdk").isEnabledFor(logging.INFO):
        return
    name = ctypes.util.find_library("asound")
    if name is None:
        return
    try:
        handler = _ALSA_HANDLER(lambda *_: None)
        ctypes.CDLL(name).snd_lib_error_set_handler(handler)
    except (OSError, AttributeError):
        return
    _alsa_quiet.append(handler)


def check_devices(choice: VoiceOptions) -> None:
    """Raise the public device error if either device cannot be opened as the voice opens
    it (mono 16-bit at 48 kHz): before connecting, not in the middle of a greeting."""
    sd = import_sounddevice()
    checks = (("input", choice.input, sd.check_input_settings),
              ("output", choice.output, sd.check_output_settings))  # fmt: skip
    for kind, device, check in checks:
        try:
            check(device=device, channels=1, dtype="int16", samplerate=RATE)
        except Exception as exc:
            error = map_device_failure(exc, opening=True)
            raise device_error(error.code, f"{kind} device {device!r}: {error.detail}") from exc


class VoiceTalk(Talk):
    """One ``talk --voice`` run: ``talk``'s, with the microphone as the uplink and the
    conversation held by voice until Ctrl-C or the session's end."""

    def __init__(self, opts: TalkOptions, voice: VoiceOptions) -> None:
        super().__init__(opts)
        self.choice = voice
        self.voice: LocalVoice | None = None
        self._device_failure: AvatarError | None = None
        self._over = asyncio.Event()

    async def run(self) -> int:
        quiet_alsa()
        try:
            check_devices(self.choice)
            self.voice = LocalVoice(
                input=self.choice.input,
                output=self.choice.output,
                echo_cancellation=self.choice.echo_cancellation,
            )
        except AvatarError as error:
            self.error(error_line(error))
            return exits.for_error(error)
        try:
            return await super().run()
        finally:
            await self.voice.stop()

    def uplink(self) -> MediaStreamTrack | None:
        assert self.voice is not None
        return self.voice.microphone

    async def exchange(self, session: AvatarSession) -> None:
        voice = self.voice
        assert voice is not None
        session.on("ended", self._on_over)
        session.on("error", self._on_error)
        voice.speaker.on_released = self._speaker_released
        await voice.start(session.avatar_audio)  # a device error raises: talk's exit code
        self.note("listening: talk to the avatar; Ctrl-C ends the conversation")
        if self.ended is None:
            await self._over.wait()
        if self._device_failure is not None:
            raise self._device_failure

    def _on_over(self, event: Event) -> None:
        self._over.set()

    def _on_error(self, event: Event) -> None:
        """The microphone failed (the session goes on with silence): the conversation
        cannot, so it ends with the device's code."""
        code = _code(event.data.get("code"))
        if code in DEVICE_CODES and self._device_failure is None:
            assert code is not None
            self._device_failure = device_error(code, "the input device failed")
            self._over.set()

    def _speaker_released(self) -> None:
        voice = self.voice
        assert voice is not None
        voice.microphone.stop()
        failure = voice.speaker.failure
        if failure is not None and self._device_failure is None:
            error = failure if isinstance(failure, AvatarError) else None
            if error is None or error.code not in DEVICE_CODES:
                error = map_device_failure(failure, opening=False)
            self._device_failure = error
        self._over.set()


def _code(value: Any) -> ErrorCode | None:
    try:
        return ErrorCode(str(value)) if value is not None else None
    except ValueError:
        return None


def talk_by_voice(opts: TalkOptions, voice: VoiceOptions) -> int:
    """Run ``talk --voice`` to its exit code (a second Ctrl-C during the close stops at
    once)."""
    try:
        return interrupts.run(VoiceTalk(opts, voice).run())
    except KeyboardInterrupt:
        print("avatar-sdk: interrupted", file=sys.stderr)
        return exits.INTERRUPTED
