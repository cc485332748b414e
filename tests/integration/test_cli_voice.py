"""``avatar-sdk talk --voice`` as a process, over a real audio server (the PulseAudio rig of
avatar_sdk.testing.audio_rig, whose environment the process inherits) against the staging
backend: a user's tone played into the room reaches the staging VAD and is shown as heard,
the avatar's answer reaches the speaker, Ctrl-C exits 130 quietly; the devices are listed,
and a device that cannot be opened is one line and exit 3 before any server session.

``AVATAR_SDK_AUDIO=off`` skips these (``make test`` installs PulseAudio as root)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from avatar_sdk.testing import StagingServer
from avatar_sdk.testing.audio_rig import AudioRig, audio_rig_missing, user_voice

from .conftest import until

_missing = audio_rig_missing()
pytestmark = [
    pytest.mark.skipif(_missing is not None, reason=f"no audio rig: {_missing}"),
    pytest.mark.xdist_group("audio_rig"),  # one PulseAudio server and its environment
    pytest.mark.realtime_audio,  # run alone by `make test`: a starved CPU underruns the loop
]

ROOT = Path(__file__).resolve().parents[2]
QUICK = ["--set", "close_timeout=1", "--set", "join_complete_timeout=2", "--reply-timeout", "10"]


@pytest.fixture
def rig() -> Iterator[AudioRig]:
    pytest.importorskip("livekit.rtc", reason="the voice extra (livekit) is not installed")
    with AudioRig(delay=0.06, gain=0.3) as running:
        yield running


async def _cli(*args: str, token: str = "unused") -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "avatar_sdk._cli", *args,
        cwd=ROOT, env={**os.environ, "AVATAR_TOKEN": token},
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def _line_with(proc: asyncio.subprocess.Process, text: str, seen: list[str]) -> str:
    assert proc.stdout is not None
    while True:
        try:
            async with asyncio.timeout(20):
                raw = await proc.stdout.readline()
        except TimeoutError:
            pytest.fail(f"no {text!r} within 20 s; printed: {seen}")
        assert raw, f"the process ended before printing {text!r}: {seen}"
        seen.append(raw.decode().rstrip("\n"))
        if text in seen[-1]:
            return seen[-1]


async def _printed(proc: asyncio.subprocess.Process, text: str, seen: list[str]) -> str:
    """A line with ``text``, printed already (``seen``) or next: the greeting streams in
    pieces, before or after the prompt line, by the timing of the run."""
    earlier = [line for line in seen if text in line]
    return earlier[0] if earlier else await _line_with(proc, text, seen)


def _greeting_said(staging: StagingServer) -> bool:
    return any(
        c.turn_task is not None and c.turn_task.done() and not c.speaking
        for c in staging.conversations.values()
    )


@pytest.mark.timeout(60)
async def test_list_devices_shows_the_rigs_devices(rig: AudioRig) -> None:
    proc = await _cli("talk", "--list-devices")  # no URL needed
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    assert any(" pulse " in f"{line} " and "in," in line for line in lines), lines
    assert any(line.startswith("><") or line.startswith("> ") for line in lines), lines


@pytest.mark.timeout(60)
async def test_a_device_that_cannot_open_is_exit_3_before_connecting(rig: AudioRig) -> None:
    async with StagingServer() as staging:
        proc = await _cli("talk", staging.url, "--insecure", "--voice", "--output", "no-such",
                          token=staging.token)  # fmt: skip
        _, err = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 3, err.decode()
        assert err.decode().splitlines() == [
            "avatar-sdk: [device_not_found] The audio device was not found. (output device"
            " 'no-such': ValueError: No output device matching 'no-such'); list them with"
            " --list-devices, pick one with --input/--output"
        ]
        assert not staging.received_events("join")  # no server session was opened


@pytest.mark.timeout(120)
async def test_talk_by_voice_hears_the_user_plays_the_answer_and_ends_on_ctrl_c(
    rig: AudioRig,
) -> None:
    async with StagingServer(speech_time_scale=0.5) as staging:
        proc = await _cli(
            "talk", staging.url, "--insecure", "--genie-url", staging.genie_url, *QUICK,
            "--voice", "--input", "pulse", "--output", "pulse", "--no-video",
            token=staging.token,
        )  # fmt: skip
        seen: list[str] = []
        try:
            async with asyncio.timeout(60):
                await _line_with(proc, "listening: talk to the avatar", seen)
                await _printed(proc, "avatar: Hello!", seen)
                assert await until(lambda: _greeting_said(staging), 15)
                await asyncio.sleep(1.0)  # the greeting's tail plays out of the speaker
                staging.brain.listen(["what time is it"], min_speech=0.25, silence=0.6)
                player = rig.talk(user_voice())
                await _line_with(proc, "what time is it", seen)  # heard, or its answer
                played = await asyncio.to_thread(rig.hear, 2.5)
                while len([line for line in seen if "what time is it" in line]) < 2:
                    await _line_with(proc, "what time is it", seen)
                await asyncio.to_thread(player.wait, 10)
            assert any(line == "[you (heard): what time is it]" for line in seen), seen
            assert any(line == "avatar: You said: what time is it" for line in seen), seen
            conv = next(iter(staging.conversations.values()))
            assert conv.voice_turns == ["what time is it"]  # the staging heard the user
            blocks = played[: len(played) // 480 * 480].reshape(-1, 480)
            loudest = float(np.sqrt((blocks**2).mean(axis=1)).max())
            assert loudest > 0.05, f"the speaker played nothing of the answer ({loudest:.4f})"
            proc.send_signal(signal.SIGINT)
            code = await asyncio.wait_for(proc.wait(), 15)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert proc.stderr is not None
        stderr = (await proc.stderr.read()).decode()
        assert code == 130, (stderr, seen)
        assert "Traceback" not in stderr
        assert stderr.strip().splitlines() == ["avatar-sdk: interrupted: closing the session"]
        assert len(staging.completed_threads) == 1  # the thread was completed


@pytest.mark.timeout(60)
async def test_a_device_lost_during_the_conversation_ends_it_with_its_code(rig: AudioRig) -> None:
    async with StagingServer() as staging:
        proc = await _cli(
            "talk", staging.url, "--insecure", "--genie-url", staging.genie_url, *QUICK,
            "--voice", "--input", "pulse", "--output", "pulse", "--no-video",
            token=staging.token,
        )  # fmt: skip
        seen: list[str] = []
        try:
            async with asyncio.timeout(30):
                await _line_with(proc, "listening: talk to the avatar", seen)
                await _printed(proc, "avatar: Hello!", seen)  # the thread is known
            rig.crash()  # the audio server dies: both devices are gone
            code = await asyncio.wait_for(proc.wait(), 15)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert proc.stderr is not None
        stderr = (await proc.stderr.read()).decode()
        assert code == 3, stderr
        assert "Traceback" not in stderr
        told = [line for line in stderr.splitlines() if line.startswith("avatar-sdk: [")]
        assert len(told) == 1 and told[0].startswith("avatar-sdk: [device_"), stderr
        assert len(staging.completed_threads) == 1  # closed as a conversation ends
