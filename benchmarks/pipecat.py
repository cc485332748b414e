"""Figure ``pipecat``: an utterance's first TTS frame → the avatar's first voiced frame at
the end of a Pipecat pipeline.

A real Pipecat pipeline ``[ScriptedAvatarVideoService, sink]`` against the staging backend
over loopback (real HTTP, real WebRTC). ``UTTERANCES`` utterances of a 0.3 s tone, each
queued as a TTS service emits it (``TTSStartedFrame``, 100 ms ``TTSAudioRawFrame`` chunks,
``TTSStoppedFrame``) once the one before has finished, so each finds the avatar idle. Per
utterance, from just before its frames are queued to: the service's ``say`` accepted (the
mp3 encoding and the HTTP answer), and the first ``SpeechOutputAudioRawFrame`` with voice
that reaches the sink. The service's own TTFB metric (the same span, measured inside the
service) is reported too.
"""

from __future__ import annotations

import asyncio
import sys

import numpy as np

from avatar_sdk.scripted import ScriptedConfig, pcm_tone
from avatar_sdk.testing import StagingServer

from .stats import FigureResult, Row, Summary, Target

TITLE = "pipecat: utterance -> first voiced frame at the pipeline's end (loopback)"
UTTERANCES = 15
TTS_RATE = 24_000
#: Information only: an utterance heard at the pipeline's end within 400 ms on loopback.
FIRST_FRAME_TARGET = Target("<", 400.0, "ms")


async def _run(utterances: int) -> FigureResult:
    # Imported here: the figure needs the ``pipecat`` extra, the rest of the bench does not.
    from loguru import logger  # noqa: PLC0415
    from pipecat.frames.frames import (  # noqa: PLC0415
        EndFrame,
        Frame,
        MetricsFrame,
        SpeechOutputAudioRawFrame,
        TTSAudioRawFrame,
        TTSStartedFrame,
        TTSStoppedFrame,
    )
    from pipecat.metrics.metrics import TTFBMetricsData  # noqa: PLC0415
    from pipecat.pipeline.pipeline import Pipeline  # noqa: PLC0415
    from pipecat.pipeline.worker import PipelineParams, PipelineWorker  # noqa: PLC0415
    from pipecat.processors.frame_processor import FrameDirection, FrameProcessor  # noqa: PLC0415
    from pipecat.workers.runner import WorkerRunner  # noqa: PLC0415

    from avatar_sdk.integrations.pipecat import ScriptedAvatarVideoService  # noqa: PLC0415

    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    loop = asyncio.get_running_loop()

    class Sink(FrameProcessor):
        def __init__(self) -> None:
            super().__init__()
            self.voiced = asyncio.Event()
            self.first_voice: float | None = None
            self.ttfb: list[float] = []

        async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            if isinstance(frame, SpeechOutputAudioRawFrame) and self.first_voice is None:
                pcm = np.frombuffer(frame.audio, dtype=np.int16).astype(np.float64)
                if len(pcm) and np.sqrt(np.mean(pcm**2)) > 300:
                    self.first_voice = loop.time()
                    self.voiced.set()
            elif isinstance(frame, MetricsFrame):
                self.ttfb += [d.value for d in frame.data if isinstance(d, TTFBMetricsData)]
            await self.push_frame(frame, direction)

    pcm = pcm_tone(440, 0.3, rate=TTS_RATE)
    step = TTS_RATE // 10
    result = FigureResult("pipecat", TITLE)
    accepted: list[float] = []
    first: list[float] = []
    missed = 0
    async with StagingServer() as staging:
        avatar = ScriptedAvatarVideoService(
            agentic_url=staging.agentic_url,
            admin_token=staging.admin_token,
            visual_id=staging.visual_id,
            allow_insecure_transport=True,
            config=ScriptedConfig(),
        )
        sink = Sink()
        worker = PipelineWorker(
            Pipeline([avatar, sink]),
            params=PipelineParams(enable_metrics=True, send_initial_empty_metrics=False),
            enable_rtvi=False,
            idle_timeout_secs=None,
        )
        ready = asyncio.Event()

        @worker.event_handler("on_pipeline_started")
        async def on_started(_worker: PipelineWorker, _frame: Frame) -> None:
            ready.set()

        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(worker)
        running = asyncio.create_task(runner.run())
        try:
            await asyncio.wait_for(ready.wait(), 30)
            finished = avatar.session.events("say_finished")
            for n in range(utterances):
                sink.first_voice = None
                sink.voiced.clear()
                frames: list[Frame] = [TTSStartedFrame()]
                frames += [
                    TTSAudioRawFrame(pcm[i : i + step].tobytes(), TTS_RATE, 1)
                    for i in range(0, len(pcm), step)
                ]
                frames.append(TTSStoppedFrame())
                t0 = loop.time()
                await worker.queue_frames(frames)
                try:
                    await asyncio.wait_for(sink.voiced.wait(), 5)
                except TimeoutError:
                    missed += 1
                async with asyncio.timeout(10):
                    await anext(aiter(finished))
                handle = avatar.says[n]
                accepted.append(handle.accepted.result() - t0)
                if sink.first_voice is not None:
                    first.append(sink.first_voice - t0)
        finally:
            await worker.queue_frame(EndFrame())
            await asyncio.wait_for(running, 15)
    acc = Summary.of(accepted).scaled(1000.0)
    result.rows.append(Row.of("utterance -> say accepted", acc, "ms"))
    if first:
        fst = Summary.of(first).scaled(1000.0)
        result.rows.append(
            Row.of("utterance -> first voiced frame at the end", fst, "ms", FIRST_FRAME_TARGET)
        )
        result.data["first_voiced_frame"] = fst.as_json("ms")
    if sink.ttfb:
        ttfb = Summary.of(sink.ttfb).scaled(1000.0)
        result.rows.append(Row.of("service TTFB metric", ttfb, "ms"))
        result.data["ttfb_metric"] = ttfb.as_json("ms")
    result.data.update({"utterances": utterances, "missed": missed, "accepted": acc.as_json("ms")})
    result.notes.append(
        f"{utterances} utterances of a 0.3 s tone as TTS frames, one at a time; "
        f"{missed} without a voiced frame at the pipeline's end."
    )
    return result


def run(utterances: int = UTTERANCES) -> FigureResult:
    """Run the pipecat figure in its own event loop."""
    return asyncio.run(_run(utterances))
