"""The Pipecat video service in a real Pipecat pipeline, against the staging avatar-session
service over real HTTP and WebRTC on loopback: TTS frames in, the avatar's voice and video
out, each utterance spoken in order (checked by its tone's frequency), an interruption
cutting the one playing and dropping the queued ones, the TTFB metric, nothing leaked."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from pipecat.frames.frames import (
    EndFrame,
    Frame,
    InterruptionFrame,
    MetricsFrame,
    OutputImageRawFrame,
    SpeechOutputAudioRawFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
)
from pipecat.metrics.metrics import TTFBMetricsData
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker, ProcessorUnusablePolicy
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.workers.runner import WorkerRunner

from avatar_sdk import AvatarError, ErrorCode, ScriptedConfig
from avatar_sdk.integrations.pipecat import ScriptedAvatarVideoService
from avatar_sdk.scripted import pcm_tone
from avatar_sdk.testing import StagingServer
from avatar_sdk.testing.leaks import LeakCheck

from .conftest import until

pytestmark = pytest.mark.asyncio

FAST = ScriptedConfig(media_stall_timeout=1.0, close_timeout=1.0, onset_margin=2.0)
OUT_RATE = 24_000
TTS_RATE = 16_000


def dominant_frequency(samples: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(samples.astype(np.float64) * np.hanning(len(samples))))
    return float(np.argmax(spectrum) * rate / len(samples))


def tts_frames(frequency: float, seconds: float, chunk: float = 0.1) -> list[Frame]:
    """One utterance as a TTS service emits it: started, audio chunks, stopped."""
    pcm = pcm_tone(frequency, seconds, rate=TTS_RATE)
    step = int(chunk * TTS_RATE)
    audio: list[Frame] = [
        TTSAudioRawFrame(audio=pcm[i : i + step].tobytes(), sample_rate=TTS_RATE, num_channels=1)
        for i in range(0, len(pcm), step)
    ]
    return [TTSStartedFrame(), *audio, TTSStoppedFrame()]


class Sink(FrameProcessor):
    """The end of the pipeline: keeps what reaches it (with its arrival time)."""

    def __init__(self) -> None:
        super().__init__()
        self.frames: list[tuple[float, Frame]] = []

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if direction is FrameDirection.DOWNSTREAM:
            self.frames.append((asyncio.get_running_loop().time(), frame))
        await self.push_frame(frame, direction)

    def of(self, kind: type[Frame]) -> list[Any]:
        return [f for _, f in self.frames if isinstance(f, kind)]

    def voiced(self, since: float = 0.0, until_: float = float("inf")) -> np.ndarray:
        """The voice frames' samples above a level, between two loop times."""
        chunks = []
        for at, frame in self.frames:
            if isinstance(frame, SpeechOutputAudioRawFrame) and since <= at <= until_:
                pcm = np.frombuffer(frame.audio, dtype=np.int16)
                if len(pcm) and np.sqrt(np.mean(pcm.astype(np.float64) ** 2)) > 300:
                    chunks.append(pcm)
        return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int16)


class Pipe:
    """A running pipeline: [avatar service, sink], driven by queue_frames."""

    def __init__(self, service: ScriptedAvatarVideoService) -> None:
        self.service = service
        self.sink = Sink()
        self.worker = PipelineWorker(
            Pipeline([service, self.sink]),
            params=PipelineParams(
                enable_metrics=True,
                audio_out_sample_rate=OUT_RATE,
                send_initial_empty_metrics=False,
            ),
            enable_rtvi=False,
            idle_timeout_secs=None,
        )
        self.runner = WorkerRunner(handle_sigint=False)
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Pipe:
        await self.runner.add_workers(self.worker)
        self.task = asyncio.create_task(self.runner.run())
        opened = await until(lambda: self.service.session.state == "live", timeout=15)
        assert opened, self.service.session.state
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.task is not None
        await self.worker.queue_frame(EndFrame())
        await asyncio.wait_for(self.task, 15)


def service(staging: StagingServer, **kwargs: Any) -> ScriptedAvatarVideoService:
    return ScriptedAvatarVideoService(
        agentic_url=staging.agentic_url,
        admin_token=staging.admin_token,
        visual_id=staging.visual_id,
        config=FAST,
        allow_insecure_transport=True,
        **kwargs,
    )


async def wait_for(predicate: Callable[[], bool], timeout: float) -> None:
    assert await until(predicate, timeout=timeout)


async def test_each_utterance_is_spoken_in_order_and_the_avatar_reaches_the_output(
    staging: StagingServer, leak_check: LeakCheck
) -> None:
    tones = (440.0, 660.0, 880.0)
    avatar = service(staging, chunk_seconds=5.0)
    async with Pipe(avatar) as pipe:
        await pipe.worker.queue_frames([f for t in tones for f in tts_frames(t, 0.6)])
        await wait_for(lambda: len(avatar.says) == 3 and avatar.says[-1].done, 15)
        results = [await h for h in avatar.says]
        starts = [await h.started for h in avatar.says]
        session_id = avatar.session.session_id or ""
    assert [r.reason for r in results] == ["played"] * 3
    assert all(s is not None for s in starts)
    # Each utterance was sent when the one before had finished: none queued on the server.
    played = staging.scripted.sessions[session_id].played
    assert [p.turn_id for p in played] == [h.turn_id for h in avatar.says]
    for before, after in zip(avatar.says, avatar.says[1:], strict=False):
        assert before.finished.result().at <= after.called_at
    # What reached the pipeline's output: the avatar's voice, each tone in its slot.
    for handle, tone in zip(avatar.says, tones, strict=True):
        heard = pipe.sink.voiced(await handle.started or 0.0, handle.finished.result().at)
        assert len(heard) > 0.3 * OUT_RATE, len(heard)
        assert abs(dominant_frequency(heard, OUT_RATE) - tone) < 20
    voice = pipe.sink.of(SpeechOutputAudioRawFrame)
    assert voice and all(f.sample_rate == OUT_RATE and f.num_channels == 1 for f in voice)
    images = pipe.sink.of(OutputImageRawFrame)
    assert images and images[0].format == "RGB"
    width, height = images[0].size
    assert len(images[0].image) == width * height * 3
    # The raw TTS audio did not pass through; the TTS markers did.
    assert not pipe.sink.of(TTSAudioRawFrame)
    assert len(pipe.sink.of(TTSStartedFrame)) == 3 and len(pipe.sink.of(TTSStoppedFrame)) == 3


async def test_a_long_utterance_starts_before_the_tts_has_finished(
    staging: StagingServer, leak_check: LeakCheck
) -> None:
    avatar = service(staging, chunk_seconds=0.5)
    async with Pipe(avatar) as pipe:
        frames = tts_frames(550.0, 1.6)
        # The TTS streams in real time: the first 0.5 s goes out before the rest exists.
        await pipe.worker.queue_frames(frames[:7])
        await wait_for(lambda: len(avatar.says) == 1, 10)
        first = avatar.says[0]
        assert first.duration == pytest.approx(0.5, abs=0.11)
        await pipe.worker.queue_frames(frames[7:])
        await wait_for(lambda: len(avatar.says) >= 2 and avatar.says[-1].done, 15)
        results = [await h for h in avatar.says]
    assert all(r.reason == "played" for r in results)
    assert sum(h.duration for h in avatar.says) == pytest.approx(1.6, abs=0.05)


async def test_an_interruption_cuts_the_utterance_and_drops_the_queued_ones(
    staging: StagingServer, leak_check: LeakCheck
) -> None:
    avatar = service(staging, chunk_seconds=10.0)
    async with Pipe(avatar) as pipe:
        await pipe.worker.queue_frames(
            tts_frames(440.0, 4.0) + tts_frames(660.0, 1.0) + tts_frames(880.0, 1.0)
        )
        await wait_for(lambda: bool(avatar.says) and avatar.says[0].started.done(), 10)
        first = avatar.says[0]
        await asyncio.wait_for(asyncio.shield(first.started), 5)
        await pipe.worker.queue_frame(InterruptionFrame())
        result = await asyncio.wait_for(asyncio.shield(first.finished), 5)
        # A new utterance after the interruption: had the queued ones been sent, they
        # would be spoken before it.
        await pipe.worker.queue_frames(tts_frames(330.0, 0.6))
        await wait_for(lambda: len(avatar.says) >= 2 and avatar.says[-1].done, 10)
        second = await avatar.says[-1]
        session_id = avatar.session.session_id or ""
    assert result.interrupted
    assert len(avatar.says) == 2
    played = staging.scripted.sessions[session_id].played
    assert [p.turn_id for p in played] == [first.turn_id, avatar.says[1].turn_id]
    assert played[0].interrupted and played[0].ended_at - played[0].started_at < 3.5
    assert second.reason == "played"
    heard = pipe.sink.voiced(result.at, second.at)
    assert abs(dominant_frequency(heard, OUT_RATE) - 330.0) < 20
    assert pipe.sink.of(InterruptionFrame)


async def test_the_ttfb_metric_runs_from_the_first_tts_frame_to_the_avatars_voice(
    staging: StagingServer, leak_check: LeakCheck
) -> None:
    avatar = service(staging)
    async with Pipe(avatar) as pipe:
        t0 = asyncio.get_running_loop().time()
        await pipe.worker.queue_frames(tts_frames(440.0, 0.5))
        await wait_for(lambda: len(avatar.says) == 1 and avatar.says[0].done, 10)
        started = await avatar.says[0].started
        assert started is not None
    ttfb = [
        d
        for m in pipe.sink.of(MetricsFrame)
        for d in m.data
        if isinstance(d, TTFBMetricsData) and d.processor == avatar.name
    ]
    assert len(ttfb) == 1, ttfb
    # From the TTS's first frame to the voice onset the session saw (plus the scheduling).
    assert 0 < ttfb[0].value <= started - t0 + 0.05, (ttfb[0].value, started - t0)


async def test_a_refused_session_is_a_pipeline_error_and_nothing_leaks(
    staging: StagingServer, leak_check: LeakCheck
) -> None:
    avatar = ScriptedAvatarVideoService(
        agentic_url=staging.agentic_url,
        admin_token="not-an-admin-token",
        visual_id=staging.visual_id,
        config=FAST,
        allow_insecure_transport=True,
    )
    errors: list[Any] = []
    sink = Sink()
    worker = PipelineWorker(
        Pipeline([avatar, sink]),
        enable_rtvi=False,
        idle_timeout_secs=None,
        processor_unusable_policy=ProcessorUnusablePolicy.CANCEL,
    )

    @worker.event_handler("on_pipeline_error")
    async def on_error(_worker: Any, frame: Any) -> None:
        errors.append(frame)

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    await asyncio.wait_for(runner.run(), 15)
    assert errors and not avatar.is_usable
    assert isinstance(errors[0].exception, AvatarError)
    assert (
        errors[0].exception.code is ErrorCode.WRONG_TOKEN_SCOPE
        or errors[0].exception.code is ErrorCode.AUTH_FAILED
    )
    assert avatar.session.state == "ended"
    assert staging.admin_token not in repr(errors)


async def test_a_refused_say_is_an_error_frame_and_the_next_utterance_is_spoken(
    staging: StagingServer, leak_check: LeakCheck
) -> None:
    avatar = service(staging)
    async with Pipe(avatar) as pipe:
        errors: list[Any] = []

        @pipe.worker.event_handler("on_pipeline_error")
        async def on_error(_worker: Any, frame: Any) -> None:
            errors.append(frame)

        staging.faults.say_refused(status=503, times=1)
        await pipe.worker.queue_frames(tts_frames(440.0, 0.4) + tts_frames(660.0, 0.4))
        await wait_for(lambda: len(avatar.says) == 1 and avatar.says[0].done, 10)
        result = await avatar.says[0]
        session_id = avatar.session.session_id or ""
    assert len(errors) == 1 and errors[0].exception.code is ErrorCode.SERVER_ERROR
    assert avatar.is_usable
    assert result.reason == "played"
    heard = pipe.sink.voiced(await avatar.says[0].started or 0.0, result.at)
    assert abs(dominant_frequency(heard, OUT_RATE) - 660.0) < 20
    assert len(staging.scripted.sessions[session_id].played) == 1


async def test_a_reclaimed_session_is_a_pipeline_error(
    staging: StagingServer, leak_check: LeakCheck
) -> None:
    avatar = service(staging)
    errors: list[Any] = []
    worker = PipelineWorker(
        Pipeline([avatar, Sink()]),
        enable_rtvi=False,
        idle_timeout_secs=None,
        processor_unusable_policy=ProcessorUnusablePolicy.CANCEL,
    )

    @worker.event_handler("on_pipeline_error")
    async def on_error(_worker: Any, frame: Any) -> None:
        errors.append(frame)

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    running = asyncio.create_task(runner.run())
    await wait_for(lambda: avatar.session.state == "live", 15)
    await staging.faults.reclaim_session(avatar.session.session_id)
    # The pipeline is cancelled by the policy, without an EndFrame from us.
    await asyncio.wait_for(running, 15)
    assert errors and not avatar.is_usable
    assert errors[0].exception.code is ErrorCode.SESSION_GONE


async def test_bad_arguments_are_refused_at_construction() -> None:
    with pytest.raises(AvatarError) as caught:
        ScriptedAvatarVideoService(
            agentic_url="http://127.0.0.1:1", admin_token="t", visual_id="v", chunk_seconds=0
        )
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    with pytest.raises(AvatarError) as caught:
        ScriptedAvatarVideoService(agentic_url="http://127.0.0.1:1", admin_token="", visual_id="v")
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
