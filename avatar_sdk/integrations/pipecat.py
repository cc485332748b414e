"""The scripted avatar as a Pipecat video service (``pip install avatar-sdk[pipecat]``).

:class:`ScriptedAvatarVideoService` sits where Pipecat's Tavus or Simli video services sit:
after the TTS, before the output transport. It owns a
:class:`~avatar_sdk.scripted.ScriptedAvatarSession` (opened on ``StartFrame``, ended on
``EndFrame`` / ``CancelFrame``), takes the TTS audio in, has the avatar speak it, and pushes
the avatar's video (``OutputImageRawFrame``) and voice (``SpeechOutputAudioRawFrame``)
downstream in place of the raw TTS audio.

Utterances are queued here, on the client, and sent to the service one at a time, each when
the one before it has finished: the service's ``interrupt`` cuts only the say playing, so a
say queued on the server would still be spoken after a barge-in. An ``InterruptionFrame``
drops what is queued here and interrupts the say playing.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

import av
import numpy as np
from pipecat.frames.frames import (
    CancelFrame,
    EndFrame,
    Frame,
    InterruptionFrame,
    OutputImageRawFrame,
    SpeechOutputAudioRawFrame,
    StartFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessorSetup
from pipecat.services.ai_service import AIService
from pipecat.services.settings import ServiceSettings

from ..errors import AvatarError, ErrorCode
from ..events.stream import Event
from ..logs import sdk_logger
from ..scripted.core.config import ScriptedConfig
from ..scripted.say import SayHandle
from ..scripted.session import ScriptedAvatarSession

log = sdk_logger(__name__)

__all__ = ["ScriptedAvatarVideoService"]


@dataclass
class _Chunk:
    """TTS audio waiting to be said: int16 PCM at ``rate`` with ``channels`` interleaved."""

    rate: int
    channels: int
    pcm: bytearray = field(default_factory=bytearray)
    #: TTSStoppedFrame seen (or the chunk was cut at ``chunk_seconds``): nothing more joins it.
    closed: bool = False
    #: The TTFB measurement (its number, 0: none) started with this chunk's first TTS frame.
    measured: int = 0

    @property
    def seconds(self) -> float:
        return len(self.pcm) / (2 * self.channels * self.rate)

    def mono(self) -> np.ndarray:
        samples = np.frombuffer(bytes(self.pcm), dtype=np.int16)
        if self.channels > 1:
            frames = samples[: len(samples) - len(samples) % self.channels]
            samples = frames.reshape(-1, self.channels).mean(axis=1).astype(np.int16)
        return samples


class ScriptedAvatarVideoService(AIService):
    """A Pipecat video service whose face is a scripted avatar session.

    ``agentic_url``, ``admin_token``, ``visual_id``, ``config``, ``allow_insecure_transport``,
    ``video``: as for :class:`~avatar_sdk.scripted.ScriptedAvatarSession`.

    ``chunk_seconds``: an utterance still streaming from the TTS is sent to the avatar once
    this much of it has arrived and the avatar is free, so its first words start before the
    TTS has finished; the rest follows as the next say. Each ``TTSStoppedFrame`` ends a
    chunk too (an utterance, usually a sentence, is never merged with the next).

    ``sample_rate``: the rate of the voice frames pushed downstream (default: the
    pipeline's ``audio_out_sample_rate``); they are mono int16.

    Metrics (with ``PipelineParams(enable_metrics=True)``): TTFB, from the first TTS frame of
    an utterance that finds the avatar idle to the avatar's first voiced frame for it.
    """

    def __init__(
        self,
        *,
        agentic_url: str,
        admin_token: str,
        visual_id: str,
        config: ScriptedConfig | None = None,
        allow_insecure_transport: bool = False,
        video: bool = True,
        chunk_seconds: float = 1.0,
        sample_rate: int | None = None,
        **kwargs: Any,
    ) -> None:
        if isinstance(chunk_seconds, bool) or not (
            isinstance(chunk_seconds, int | float) and chunk_seconds > 0
        ):
            raise AvatarError(ErrorCode.INVALID_ARGUMENT, "chunk_seconds must be a number > 0")
        super().__init__(settings=ServiceSettings(model=None), **kwargs)
        # Built here so that a bad argument fails at construction, not at StartFrame.
        self._session = ScriptedAvatarSession(
            agentic_url,
            admin_token,
            visual_id,
            config=config,
            allow_insecure_transport=allow_insecure_transport,
            video=video,
        )
        self._video = video
        self._chunk_seconds = float(chunk_seconds)
        self._rate_override = sample_rate
        self._out_rate = sample_rate or 24_000
        self._queue: deque[_Chunk] = deque()
        self._open: _Chunk | None = None
        self._wake = asyncio.Event()
        self._current: SayHandle | None = None
        #: Bumped by each interruption: a say sent across one is cut when it starts.
        self._generation = 0
        #: After an interruption, TTS audio is dropped until the next TTSStartedFrame.
        self._discarding = False
        self._ttfb_pending = False
        self._sending = False
        self._ttfb_token = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._measures: set[asyncio.Task[None]] = set()
        self._opened = False
        self._closed = False
        #: Says sent to the avatar (handles, in order), for applications and tests.
        self.says: list[SayHandle] = []

    # -- introspection ----------------------------------------------------------------------
    @property
    def session(self) -> ScriptedAvatarSession:
        """The avatar session this service owns (open between StartFrame and EndFrame)."""
        return self._session

    def can_generate_metrics(self) -> bool:
        return True

    # -- lifecycle --------------------------------------------------------------------------
    async def setup(self, setup: FrameProcessorSetup) -> None:  # type: ignore[override]
        await super().setup(setup)
        if self._rate_override is None:
            self._out_rate = setup.audio_out_sample_rate

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        if self._opened:
            return
        self._opened = True
        try:
            await self._session.start()
        except AvatarError as error:
            log.warning("avatar session did not open: %s", error)
            # The service cannot do its job: unusable (the worker's processor_unusable_policy
            # decides whether the pipeline goes on without the avatar or is cancelled).
            await self.push_error(
                error_msg=f"avatar session did not open: {error}",
                exception=error,
                force_treat_as_permanent=True,
            )
            return
        self._session.on("ended", self._on_session_ended)
        jobs = [("avatar-say", self._send_loop()), ("avatar-voice", self._pump_voice())]
        if self._video:
            jobs.append(("avatar-video", self._pump_video()))
        for name, job in jobs:
            self._tasks.append(self.create_task(self._guarded(name, job), name))

    async def _guarded(self, name: str, job: Coroutine[Any, Any, None]) -> None:
        """Run one of the service's loops; a failure is logged and reported upstream."""
        try:
            await job
        except Exception as exc:
            log.error("avatar service task %s failed: %s", name, type(exc).__name__)
            await self.push_error(error_msg=f"avatar service task {name} failed", exception=exc)

    async def _on_session_ended(self, event: Event) -> None:
        """The session ended by itself (reclaimed, expired, gave up): the service is done."""
        if self._closed:
            return
        code = str(event.data.get("code") or "ended")
        try:
            error_code = ErrorCode(code)
        except ValueError:
            error_code = ErrorCode.INTERNAL
        self._drop_queued()
        await self.push_error(
            error_msg=f"the avatar session ended ({code})",
            exception=AvatarError(error_code, f"the avatar session ended ({code})"),
            force_treat_as_permanent=True,
        )

    async def stop(self, frame: EndFrame) -> None:
        await super().stop(frame)
        await self._close()

    async def cancel(self, frame: CancelFrame) -> None:
        await super().cancel(frame)
        await self._close()

    async def cleanup(self) -> None:
        await super().cleanup()
        await self._close()

    async def _close(self) -> None:
        """Stop the tasks and end the session; idempotent (stop, cancel and cleanup call it)."""
        if self._closed:
            return
        self._closed = True
        self._drop_queued()
        tasks, self._tasks = self._tasks + list(self._measures), []
        self._measures.clear()
        for task in tasks:
            await self.cancel_task(task)
        await self._session.end()

    # -- frames in --------------------------------------------------------------------------
    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        if isinstance(frame, InterruptionFrame):
            # Before the base class, whose stop_all_metrics would report a TTFB that the
            # avatar never reached.
            await self._on_interruption()
        await super().process_frame(frame, direction)
        if isinstance(frame, TTSAudioRawFrame):
            # Consumed: the avatar's voice goes downstream instead.
            await self._on_tts_audio(frame)
            return
        if isinstance(frame, TTSStartedFrame):
            self._discarding = False
            await self._start_utterance()
        elif isinstance(frame, TTSStoppedFrame):
            await self._close_open()
        await self.push_frame(frame, direction)

    async def _start_utterance(self) -> None:
        await self._close_open()
        idle = not self._sending and (self._current is None or self._current.done)
        if idle and not self._queue and not self._ttfb_pending:
            self._ttfb_pending = True
            self._ttfb_token += 1
            self._open = _Chunk(rate=0, channels=0, measured=self._ttfb_token)
            await self.start_ttfb_metrics()

    async def _on_tts_audio(self, frame: TTSAudioRawFrame) -> None:
        if self._discarding or self._closed or not frame.audio:
            return
        chunk = self._open
        if chunk is not None and chunk.rate == 0:  # opened by TTSStartedFrame, still empty
            chunk.rate, chunk.channels = frame.sample_rate, frame.num_channels
        if chunk is None or (chunk.rate, chunk.channels) != (frame.sample_rate, frame.num_channels):
            await self._close_open()
            chunk = self._open = _Chunk(rate=frame.sample_rate, channels=frame.num_channels)
        chunk.pcm.extend(frame.audio)
        self._wake.set()

    async def _close_open(self) -> None:
        chunk, self._open = self._open, None
        if chunk is not None and chunk.pcm:
            chunk.closed = True
            self._queue.append(chunk)
            self._wake.set()
        elif chunk is not None and chunk.measured and self._ttfb_pending:
            # An utterance without audio: nothing to measure.
            self._ttfb_pending = False
            await self.cancel_ttfb_metrics()

    def _drop_queued(self) -> None:
        self._queue.clear()
        self._open = None

    async def _on_interruption(self) -> None:
        self._generation += 1
        self._discarding = True
        self._drop_queued()
        if self._ttfb_pending:
            self._ttfb_pending = False
            await self.cancel_ttfb_metrics()
        current = self._current
        if current is not None and not current.done and self._session.state == "live":
            try:
                await self._session.interrupt()
            except AvatarError as error:
                await self.push_error(
                    error_msg=f"avatar interrupt failed: {error}", exception=error
                )

    # -- saying -----------------------------------------------------------------------------
    def _take(self) -> _Chunk | None:
        """The next chunk to say: a finished one, or the streaming one once it is long enough."""
        if self._queue:
            return self._queue.popleft()
        chunk = self._open
        if chunk is not None and chunk.pcm and chunk.seconds >= self._chunk_seconds:
            self._open = _Chunk(rate=chunk.rate, channels=chunk.channels)
            chunk.closed = True
            return chunk
        return None

    async def _send_loop(self) -> None:
        while True:
            chunk = self._take()
            if chunk is None:
                self._wake.clear()
                await self._wake.wait()
                continue
            generation = self._generation
            samples = chunk.mono()
            self._sending = True
            try:
                handle = await self._session.say(
                    samples, duration=len(samples) / chunk.rate, sample_rate=chunk.rate
                )
            except AvatarError as error:
                await self._say_failed(chunk, error)
                if self._session.state == "ended":
                    return
                continue
            finally:
                self._sending = False
            self._current = handle
            self.says.append(handle)
            if chunk.measured:
                task = self.create_task(self._measure(handle, chunk.measured), "avatar-ttfb")
                self._measures.add(task)
                task.add_done_callback(self._measures.discard)
            # Interrupted while the say was on its way: the server has queued it; cut it as
            # soon as it plays.
            if (
                generation != self._generation
                and await handle.started is not None
                and self._session.state == "live"
            ):
                await self._interrupt_quietly()
            await handle

    async def _say_failed(self, chunk: _Chunk, error: AvatarError) -> None:
        log.warning("avatar say failed (%s): %s", error.code, error)
        if chunk.measured == self._ttfb_token and self._ttfb_pending:
            self._ttfb_pending = False
            await self.cancel_ttfb_metrics()
        await self.push_error(
            error_msg=f"avatar say failed: {error}",
            exception=error,
            force_treat_as_permanent=self._session.state == "ended",
        )

    async def _interrupt_quietly(self) -> None:
        try:
            await self._session.interrupt()
        except AvatarError as error:
            log.warning("avatar interrupt failed (%s): %s", error.code, error)

    async def _measure(self, handle: SayHandle, token: int) -> None:
        started = await handle.started
        if not self._ttfb_pending or token != self._ttfb_token:
            return  # cancelled since (an interruption), or another measurement began
        self._ttfb_pending = False
        if started is None:
            await self.cancel_ttfb_metrics()
        else:
            await self.stop_ttfb_metrics()

    # -- frames out -------------------------------------------------------------------------
    async def _pump_voice(self) -> None:
        resampler = av.AudioResampler(format="s16", layout="mono", rate=self._out_rate)
        async with self._session.frames("audio") as frames:
            async for frame in frames:
                if not isinstance(frame, av.AudioFrame):
                    continue
                try:
                    converted = resampler.resample(frame)
                except ValueError:
                    # The downlink's format changed (a re-subscribe): a resampler for it.
                    resampler = av.AudioResampler(format="s16", layout="mono", rate=self._out_rate)
                    converted = resampler.resample(frame)
                for out in converted:
                    pcm = out.to_ndarray().tobytes()
                    if pcm:
                        await self.push_frame(
                            SpeechOutputAudioRawFrame(
                                audio=pcm, sample_rate=self._out_rate, num_channels=1
                            )
                        )

    async def _pump_video(self) -> None:
        async with self._session.frames("video", max_queue=30) as frames:
            async for frame in frames:
                if not isinstance(frame, av.VideoFrame):
                    continue
                image = frame.to_ndarray(format="rgb24")
                out = OutputImageRawFrame(
                    image=image.tobytes(), size=(frame.width, frame.height), format="RGB"
                )
                await self.push_frame(out)
