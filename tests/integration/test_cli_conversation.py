"""``avatar-sdk talk`` as a conversation (issue 18, item 7): each turn waits until the avatar
has finished saying the previous answer (no barge-in on its own answer), the run closes only
once the last answer has been spoken (a ``--record`` holds all of it), and a failure is one
line on stderr written for the command line, nothing about it on stdout."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import av
import numpy as np

from avatar_sdk.testing import StagingServer

from .test_cli import cli, one_line_error, talk_args

#: Forty words: ten caption chunks of 400 ms, spoken at the staging scale (0.25): 1 s.
LONG = " ".join(f"word{i}" for i in range(40))


def spoken_seconds(staging: StagingServer, text: str) -> float:
    chunks = -(-len(text.split()) // staging.brain.chunk_words)
    return chunks * 0.4 * staging.speech_time_scale


def tone_runs(path: Path, window: float = 0.01) -> list[float]:
    """The lengths (s) of the runs of voice in the recording, in order, judged on windows
    of ``window`` seconds (a container's frames can be longer than a gap between answers)."""
    with av.open(str(path)) as container:
        frames = list(container.decode(audio=0))
    rate = frames[0].sample_rate
    samples = np.concatenate([f.to_ndarray().astype(np.float64).reshape(-1) for f in frames])
    channels = len(frames[0].layout.channels) if not frames[0].format.is_planar else 1
    step = max(1, int(rate * window)) * channels
    scale = 32768.0 if frames[0].format.name.startswith("s16") else 1.0
    runs: list[float] = []
    current = 0.0
    for start in range(0, len(samples) - step + 1, step):
        chunk = samples[start : start + step] / scale
        if float(np.sqrt(np.mean(chunk * chunk))) > 0.01:
            current += window
        elif current:
            runs.append(round(current, 3))
            current = 0.0
    if current:
        runs.append(round(current, 3))
    return runs


async def _keep_voices(staging: StagingServer, voices: list[Any]) -> None:
    """Collect each WHEP viewer's voice track while the run lasts (a viewer is forgotten
    at its DELETE, its track's counters with it)."""
    while True:
        for viewer in list(staging.media.viewers.values()):
            if viewer.audio not in voices:
                voices.append(viewer.audio)
        await asyncio.sleep(0.05)


async def test_talk_waits_out_each_spoken_answer_and_records_the_last_one_whole(
    staging: StagingServer, tmp_path: Path
) -> None:
    recording = tmp_path / "avatar.wav"
    staging.brain.reply("First answer, " + LONG)
    staging.brain.reply("Second answer, " + LONG)
    voices: list[Any] = []  # the server's voice tracks, kept past their WHEP DELETE
    watching = asyncio.ensure_future(_keep_voices(staging, voices))
    try:
        result = await cli(
            *talk_args(staging, "--no-video", "--record", str(recording), "--json",
                       "--say", "first question", "--say", "second question"),
            token=staging.token,
        )  # fmt: skip
    finally:
        watching.cancel()
    assert result.exit_code == 0, result.output
    names = [json.loads(line)["event"] for line in result.stdout.splitlines()]
    # No barge-in on its own answers: nothing was interrupted, every turn was answered.
    assert "agent_interrupted" not in names, names
    assert names.count("agent_turn_ended") == 3
    talking = [
        json.loads(line)["data"]["talking"]
        for line in result.stdout.splitlines()
        if json.loads(line)["event"] == "agent_talking"
    ]
    assert talking == [True, False] * 3, talking  # greeting, two answers: each spoken to the end
    # The recording holds the whole last answer: its last run of voice lasts as long as
    # the answer's captions (the close came after the avatar had finished speaking).
    runs = tone_runs(recording)
    expected = spoken_seconds(staging, "Second answer, " + LONG)
    # Within two 20 ms frames: the audio in flight when the server said it finished
    # talking (the downlink's latency and jitter buffer) is in the file too. Less what the
    # server's voice passed over after its own loop stalled (a fresh-clone run at load 8:
    # 0.97 s of a 1.1 s answer), which no recording can hold.
    skipped = sum(voice.skipped_seconds for voice in voices)
    assert voices and len(runs) == 3, (voices, runs)
    assert runs[-1] >= expected - 0.04 - skipped, (runs, expected, skipped)


async def test_talk_plain_output_shows_no_interruption(staging: StagingServer) -> None:
    result = await cli(*talk_args(staging, "--no-video", "--say", "Hello there",
                                  "--say", "What can you do"), token=staging.token)  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "[avatar interrupted]" not in result.stdout, result.stdout
    assert result.stdout.count("avatar: You said:") == 2, result.stdout


# -- failures: one line on stderr, for the command line --------------------------------------
def assert_one_line_only(result: object, *, stdout_free_of: str) -> str:
    from click.testing import Result  # noqa: PLC0415

    assert isinstance(result, Result)
    line = one_line_error(result)
    assert result.stderr.strip().splitlines() == [line], result.stderr
    assert stdout_free_of not in result.stdout, result.stdout
    return line


async def test_talk_wrong_token_is_one_line_on_stderr(staging: StagingServer) -> None:
    result = await cli(*talk_args(staging, "--no-media", "--say", "hi"), token="not-the-token")
    assert result.exit_code == 3
    line = assert_one_line_only(result, stdout_free_of="auth_failed")
    assert "[auth_failed]" in line and "not-the-token" not in result.output
    assert "refused the token" not in result.stdout


async def test_talk_unreachable_is_one_line_for_all_attempts() -> None:
    staging = StagingServer()
    await staging.start()
    url = staging.url
    await staging.stop()  # nothing listens there any more: connection refused
    result = await cli("talk", url, "--insecure", "--no-media", "--say", "hi",
                       "--connect-attempts", "3", token="t")  # fmt: skip
    assert result.exit_code == 5, result.output
    line = assert_one_line_only(result, stdout_free_of="unreachable")
    assert "[unreachable]" in line and "after 3 attempts" in line
    assert result.stdout == ""


async def test_talk_missing_insecure_is_a_usage_error_naming_the_flag(
    staging: StagingServer,
) -> None:
    result = await cli("talk", staging.url, "--no-media", "--say", "hi", token=staging.token)
    assert result.exit_code == 2, result.output
    line = assert_one_line_only(result, stdout_free_of="insecure")
    assert "--insecure" in line, line
    assert "allow_insecure_transport" not in line, line
    assert staging.connections == 0


async def test_talk_renew_carries_the_conversation_past_the_servers_cap(
    staging: StagingServer,
) -> None:
    staging.max_conversation_length = 5.0
    staging.time_warning_before = 4.0
    turns = [f"question {n}" for n in range(1, 11)]
    for n in range(1, 11):
        staging.brain.reply(f"Answer {n}, " + LONG)
    says = [arg for text in turns for arg in ("--say", text)]
    result = await cli(*talk_args(staging, "--no-media", "--renew", *says), token=staging.token)
    assert result.exit_code == 0, result.output
    assert "renewed #1 (make_before_break" in result.stdout
    assert "ended: " in result.stdout and "conversation_ended" not in result.stdout
    for n in range(1, 11):
        assert f"Answer {n}," in result.stdout
    assert staging.expired_sids == []
