"""The scripted avatar as the face of a Pipecat pipeline.

    user text -> ScriptedLLM -> ToneTTS -> ScriptedAvatarVideoService -> Monitor

A scripted "LLM" answers each user turn with a few sentences; a tone "TTS" turns each
sentence into TTSStarted / TTSAudioRaw / TTSStopped frames of a tone (a real TTS service
goes in its place); the avatar service has the avatar speak them, sentence by sentence, and
pushes its video and voice downstream, where an output transport would go. A second turn is
cut by an interruption (a barge-in). Run it as is against the embedded staging backend::

    .venv/bin/python examples/pipecat_avatar.py

Against a real service set ``AGENTIC_URL``, ``ADMIN_TOKEN`` (an admin token, minted on
your server) and ``VISUAL_ID``. Needs ``pip install avatar-sdk[pipecat]``.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from contextlib import AsyncExitStack

from loguru import logger
from pipecat.frames.frames import (
    EndFrame,
    Frame,
    InterruptionFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    MetricsFrame,
    OutputImageRawFrame,
    SpeechOutputAudioRawFrame,
    TextFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
)
from pipecat.metrics.metrics import TTFBMetricsData
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.workers.runner import WorkerRunner

from avatar_sdk.events.stream import EventStream
from avatar_sdk.integrations.pipecat import ScriptedAvatarVideoService
from avatar_sdk.scripted import pcm_tone
from avatar_sdk.testing import StagingServer

REPLIES = {
    "hello": ["Hello there.", "I am the avatar of your own agent.", "What shall we do?"],
    "story": ["Once upon a time, a very long sentence began and went on and on.", "The end."],
}
TTS_RATE = 24_000


class ScriptedLLM(FrameProcessor):
    """Answers a user turn (a TranscriptionFrame) with the scripted sentences for it."""

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, TranscriptionFrame):
            await self.push_frame(LLMFullResponseStartFrame())
            for sentence in REPLIES.get(frame.text, ["I do not know that one."]):
                await self.push_frame(TextFrame(sentence))
            await self.push_frame(LLMFullResponseEndFrame())
        else:
            await self.push_frame(frame, direction)


class ToneTTS(FrameProcessor):
    """Each sentence becomes a tone: 0.06 s per character, its pitch set by its order."""

    def __init__(self) -> None:
        super().__init__()
        self.sentences = 0

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, TextFrame) and not isinstance(frame, TranscriptionFrame):
            self.sentences += 1
            for out in self.speak(frame.text, 330.0 + 110.0 * (self.sentences % 5)):
                await self.push_frame(out)
        else:
            await self.push_frame(frame, direction)

    def speak(self, text: str, frequency: float) -> Iterator[Frame]:
        pcm = pcm_tone(frequency, min(0.06 * len(text), 4.0), rate=TTS_RATE)
        step = TTS_RATE // 10  # 100 ms chunks, as a streaming TTS sends them
        yield TTSStartedFrame()
        for i in range(0, len(pcm), step):
            yield TTSAudioRawFrame(pcm[i : i + step].tobytes(), TTS_RATE, 1)
        yield TTSStoppedFrame()


class Monitor(FrameProcessor):
    """Where the output transport would go: counts what reaches it."""

    def __init__(self) -> None:
        super().__init__()
        self.video = self.voice = self.raw_tts = 0
        self.ttfb: list[float] = []

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, OutputImageRawFrame):
            self.video += 1
        elif isinstance(frame, SpeechOutputAudioRawFrame):
            self.voice += 1
        elif isinstance(frame, TTSAudioRawFrame):
            self.raw_tts += 1
        elif isinstance(frame, MetricsFrame):
            self.ttfb += [d.value for d in frame.data if isinstance(d, TTFBMetricsData)]
        await self.push_frame(frame, direction)


async def next_event(events: EventStream, name: str, count: int = 1) -> None:
    """Wait for ``count`` more session events ``name`` (say_started, say_finished)."""
    async with asyncio.timeout(20):
        async for event in events:
            count -= event.name == name
            if count == 0:
                return


async def converse(url: str, token: str, visual_id: str, insecure: bool) -> None:
    avatar = ScriptedAvatarVideoService(
        agentic_url=url,
        admin_token=token,
        visual_id=visual_id,
        allow_insecure_transport=insecure,
        chunk_seconds=1.0,  # a long sentence starts after its first second of TTS audio
    )
    monitor = Monitor()
    worker = PipelineWorker(
        Pipeline([ScriptedLLM(), ToneTTS(), avatar, monitor]),
        params=PipelineParams(enable_metrics=True, send_initial_empty_metrics=False),
        enable_rtvi=False,
        idle_timeout_secs=None,
    )
    ready = asyncio.Event()

    @worker.event_handler("on_pipeline_started")
    async def on_started(_worker: PipelineWorker, _frame: Frame) -> None:
        ready.set()  # the avatar session is open: StartFrame went through the service

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    running = asyncio.create_task(runner.run())
    await asyncio.wait_for(ready.wait(), 30)
    events = avatar.session.events("say_started", "say_finished")

    await worker.queue_frame(TranscriptionFrame("hello", "user", ""))
    await next_event(events, "say_finished", 3)
    for n, say in enumerate(avatar.says, 1):
        started, result = await say.started, await say
        heard = f"voice {started - say.called_at:.2f}s after it was sent" if started else "unheard"
        print(f"sentence {n}: {say.duration:.2f}s, {heard}, finished ({result.reason})")

    # A barge-in: the user talks over the long sentence; the rest of the reply is dropped.
    await worker.queue_frame(TranscriptionFrame("story", "user", ""))
    await next_event(events, "say_started")
    await worker.queue_frame(InterruptionFrame())
    result = await avatar.says[3]
    await asyncio.sleep(1.0)  # long enough for a dropped sentence to have been sent
    print(f"barge-in: the long sentence finished ({result.reason}); says after it: "
          f"{len(avatar.says) - 4}")  # fmt: skip

    await worker.queue_frame(EndFrame())
    await running
    print(f"TTFB (first TTS frame -> avatar voice): {', '.join(f'{t:.3f}s' for t in monitor.ttfb)}")
    print(f"at the output: {monitor.video} video frames, {monitor.voice} voice frames, "
          f"{monitor.raw_tts} raw TTS frames")  # fmt: skip


async def main() -> None:
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    async with AsyncExitStack() as stack:
        url = os.environ.get("AGENTIC_URL")
        if url:
            await converse(url, os.environ["ADMIN_TOKEN"], os.environ["VISUAL_ID"], False)
            return
        staging = await stack.enter_async_context(StagingServer())
        # the staging backend is plain http on loopback
        await converse(staging.agentic_url, staging.admin_token, staging.visual_id, True)


if __name__ == "__main__":
    asyncio.run(main())
