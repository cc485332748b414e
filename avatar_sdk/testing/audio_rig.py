"""A real audio server for tests: PulseAudio with a speaker that the microphone hears.

:class:`AudioRig` starts a private PulseAudio daemon (its own runtime directory, so it
touches no user's session; root works: ``--system=false`` with a private ``HOME``) with two
null sinks: ``speaker`` (what the SDK plays) and ``room`` (what the microphone hears, its
monitor is the microphone). A loopback module carries the speaker into the room with a
delay (``delay`` seconds, PulseAudio's ``latency_msec``) and an attenuation (``gain``, the
room sink's volume), so the avatar's voice really comes back through a device loop.
PortAudio reaches it through ALSA's ``pulse`` device (Debian's ``libasound2-plugins``);
``PULSE_SINK`` / ``PULSE_SOURCE`` in this process's environment pick the sinks.
:meth:`AudioRig.talk` plays a user's sound straight into the room (``pacat``);
:meth:`AudioRig.hear` records what a sink plays (``parec``), for a test that runs the SDK in
another process (the ``avatar-sdk talk --voice`` subprocess inherits this environment).

Needs ``pulseaudio``, ``pulseaudio-utils`` and ``libportaudio2`` (``make test`` installs
them as root). ``AVATAR_SDK_AUDIO=off`` skips the tests that need it.
"""

from __future__ import annotations

import contextlib
import ctypes.util
import importlib.util
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Self

import numpy as np

__all__ = ["AudioRig", "audio_rig_missing", "user_voice"]

_ENV = ("XDG_RUNTIME_DIR", "PULSE_RUNTIME_PATH", "PULSE_SERVER", "PULSE_SINK", "PULSE_SOURCE")


def user_voice(seconds: float = 1.0) -> np.ndarray:
    """A user talking, for :meth:`AudioRig.talk`: harmonics of a gliding pitch with a
    syllable rhythm, float at 48 kHz. Not a steady tone: the echo canceller's noise
    suppressor takes a steady tone for noise and can hold it under the staging VAD's
    threshold (the uplink then carried it at 0.02-0.035 RMS, from 0.064)."""
    t = np.arange(round(seconds * 48000)) / 48000
    phase = 2 * np.pi * np.cumsum(140 + 60 * np.sin(2 * np.pi * 1.3 * t)) / 48000
    voice = sum(np.sin(k * phase) / k for k in range(1, 12)) * (0.8 + 0.2 * np.sin(8 * np.pi * t))
    out: np.ndarray = 0.5 * voice / np.sqrt((voice**2).mean())
    return out


def audio_rig_missing() -> str | None:
    """Why the rig cannot run here (None: it can)."""
    if os.environ.get("AVATAR_SDK_AUDIO", "").lower() == "off":
        return "AVATAR_SDK_AUDIO=off"
    for tool in ("pulseaudio", "pactl", "pacat", "parec"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (make test installs pulseaudio as root)"
    if importlib.util.find_spec("sounddevice") is None:
        return "sounddevice is not installed (the voice extra)"
    if ctypes.util.find_library("portaudio") is None:
        return "libportaudio2 is not installed (make test installs it as root)"
    return None


def _rescan_portaudio() -> None:
    """PortAudio lists ALSA's ``pulse`` device only while a server answers: when
    sounddevice was imported before this rig started, make it list the devices again."""
    sd = sys.modules.get("sounddevice")
    if sd is not None:
        sd._terminate()
        sd._initialize()


class AudioRig:
    """A private PulseAudio server with a speaker -> room loop (see the module docstring)."""

    def __init__(self, *, delay: float = 0.06, gain: float = 0.3) -> None:
        self.delay = delay
        self.gain = gain
        self._dir: Path | None = None
        self._pid: int | None = None
        self._saved: dict[str, str | None] = {}
        self._players: list[subprocess.Popen[bytes]] = []

    def _env(self) -> dict[str, str]:
        assert self._dir is not None
        return {
            **os.environ,
            "HOME": str(self._dir),
            "XDG_RUNTIME_DIR": str(self._dir),
            "PULSE_RUNTIME_PATH": str(self._dir / "pulse"),
        }

    def _pactl(self, *args: str) -> str:
        done = subprocess.run(
            ["pactl", *args],
            check=False,
            env=self._env(),
            capture_output=True,
            text=True,
            timeout=10,
        )
        if done.returncode != 0:
            raise RuntimeError(f"pactl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def start(self) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="avatar-sdk-pulse-"))
        subprocess.run(
            [
                "pulseaudio", "-n", "--daemonize=yes", "--exit-idle-time=-1",
                "--system=false", "--use-pid-file=yes",
                f"--log-target=file:{self._dir / 'pulse.log'}",
                "-L", "module-native-protocol-unix",
                "-L", "module-null-sink sink_name=speaker rate=48000 channels=1",
                "-L", "module-null-sink sink_name=room rate=48000 channels=1",
            ],
            env=self._env(), check=True, timeout=20, capture_output=True,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while True:
            try:
                self._pactl("info")
                break
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        pid_file = self._dir / "pulse" / "pid"
        with contextlib.suppress(OSError, ValueError):
            self._pid = int(pid_file.read_text().strip())
        self._pactl(
            "load-module", "module-loopback", "source=speaker.monitor", "sink=room",
            f"latency_msec={round(self.delay * 1000)}", "source_dont_move=true",
            "sink_dont_move=true",
        )  # fmt: skip
        # PulseAudio's software volume is cubic: amplitude = (volume / 65536) ** 3
        self._pactl("set-sink-volume", "room", str(round(self.gain ** (1 / 3) * 65536)))
        env = self._env()
        for key in _ENV:
            self._saved[key] = os.environ.get(key)
        os.environ.update({k: env[k] for k in ("XDG_RUNTIME_DIR", "PULSE_RUNTIME_PATH")})
        os.environ["PULSE_SINK"] = "speaker"
        os.environ["PULSE_SOURCE"] = "room.monitor"
        _rescan_portaudio()
        self._wait_until_the_room_is_heard()

    def _wait_until_the_room_is_heard(self, timeout: float = 15.0) -> None:
        """Return once the microphone's source delivers audio. A fresh null sink's monitor
        first answers after about 1.9 s (measured); a microphone opened before that waits
        as long for its first frame, near :class:`~avatar_sdk.media.MicrophoneSource`'s
        stall timeout (2 s), so a slow machine failed it as ``device_busy``."""
        with subprocess.Popen(
            ["parec", "--device=room.monitor", "--format=s16le", "--rate=48000",
             "--channels=1", "--latency-msec=20", "--raw"],
            env=self._env(), stdout=subprocess.PIPE,
        ) as proc:  # fmt: skip
            assert proc.stdout is not None
            try:
                deadline = time.monotonic() + timeout
                while time.monotonic() < deadline:
                    ready, _, _ = select.select([proc.stdout], [], [], 0.1)
                    if ready and proc.stdout.read1(1920):  # type: ignore[attr-defined]
                        return
                raise RuntimeError(f"the rig's room.monitor gave no audio in {timeout}s")
            finally:
                proc.kill()

    def talk(self, samples: np.ndarray, rate: int = 48000) -> subprocess.Popen[bytes]:
        """Play ``samples`` (float, full scale 1) into the room, as a user talking."""
        pcm = (np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes()
        proc = subprocess.Popen(
            ["pacat", "--playback", "--device=room", "--format=s16le", f"--rate={rate}",
             "--channels=1", "--latency-msec=20", "--raw"],
            env=self._env(), stdin=subprocess.PIPE,
        )  # fmt: skip
        self._players.append(proc)
        assert proc.stdin is not None
        proc.stdin.write(pcm)
        proc.stdin.close()
        return proc

    def hear(self, seconds: float, device: str = "speaker.monitor") -> np.ndarray:
        """Record ``seconds`` of ``device`` (default: what the speaker plays) as float
        samples (full scale 1, 48 kHz mono); blocks, so a test runs it in a thread."""
        count = round(seconds * 48000) * 2
        with subprocess.Popen(
            ["parec", f"--device={device}", "--format=s16le", "--rate=48000", "--channels=1",
             "--latency-msec=20", "--raw"],
            env=self._env(), stdout=subprocess.PIPE,
        ) as proc:  # fmt: skip
            assert proc.stdout is not None
            data = b""
            try:
                while len(data) < count:
                    chunk = proc.stdout.read(count - len(data))
                    if not chunk:
                        break
                    data += chunk
            finally:
                proc.kill()
        return np.frombuffer(data[: len(data) // 2 * 2], dtype="<i2").astype(np.float64) / 32768

    def crash(self) -> None:
        """The audio server dies at once (SIGKILL): every device the SDK holds is lost, as
        when a USB headset is pulled. :meth:`stop` still cleans up."""
        if self._pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self._pid, 9)

    def stop(self) -> None:
        for proc in self._players:
            if proc.poll() is None:
                proc.kill()
            proc.wait(5)
        self._players.clear()
        for key, value in self._saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved.clear()
        if self._dir is not None:
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                subprocess.run(
                    ["pulseaudio", "--kill"],
                    check=False,
                    env=self._env(),
                    timeout=10,
                    capture_output=True,
                )
            if self._pid is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(self._pid, 15)
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
