"""``avatar-sdk talk``: one headless conversation, ended by an exit code a script can trust.

The run: (check the thread is free) → connect, retrying what a retry can fix → the greeting
→ each turn (``--say``, or stdin lines) answered or timed out → close, which completes the
thread. Ctrl-C cancels whatever is under way and still closes (and completes) within
``close_timeout``. The exit code comes from how the session ended (:mod:`.exits`).
"""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from ..besteffort import best_effort
from ..config import RetryPolicy, SessionConfig
from ..errors import AvatarError, ErrorCode
from ..events.bus import Event
from ..lifecycle.leases import default_leases
from ..session.facade import AvatarSession
from . import exits, interrupts
from .messages import error_line
from .output import ConversationPrinter, JsonPrinter, Screen

if TYPE_CHECKING:
    from ..media.recorder import Recorder

#: After the audio file has been sent, the avatar counts as done once it has been quiet
#: (no turn in progress) this long: its answer to speech starts well within it.
AUDIO_SETTLE = 1.5
#: With --record, after the avatar has finished talking, how long the close waits at most
#: for the audio still in flight on the downlink (its latency and jitter buffer) to reach
#: the file: until a silent frame arrives, or frames stop coming.
AUDIO_DRAIN = 0.5
#: A received frame below this RMS level (1.0 = full scale) is silence.
SILENCE_LEVEL = 0.01


@dataclass
class TalkOptions:
    """Everything ``talk`` was asked to do (the token is never printed)."""

    url: str
    token: str = field(repr=False)
    turns: list[str] | None = None  # None: read stdin lines
    genie_url: str | None = None
    thread_id: str | None = None
    json: bool = False
    audio: Path | None = None
    record: Path | None = None
    #: Write a cassette of the session here (``AvatarSession(record=...)``).
    cassette: Path | None = None
    media: bool = True
    video: bool = True
    insecure: bool = False
    ca_file: Path | None = None
    config: SessionConfig = field(default_factory=SessionConfig)
    reply_timeout: float = 30.0
    connect_attempts: int = 3


class _Played(MediaStreamTrack):
    """A source that says when it has been sent to the end (``done``)."""

    kind = "audio"

    def __init__(self, inner: MediaStreamTrack) -> None:
        super().__init__()
        self.inner = inner
        self.done = asyncio.Event()

    async def recv(self) -> Any:
        try:
            return await self.inner.recv()
        except MediaStreamError:
            self.done.set()
            raise

    def stop(self) -> None:
        super().stop()
        self.inner.stop()


class _Heard(MediaStreamTrack):
    """The avatar's voice as the recorder reads it, with a note of when it fell silent:
    :meth:`drained` returns once a silent frame has been read after the call (all the
    voice sent before it is in the file), or after ``bound`` seconds."""

    kind = "audio"

    def __init__(self, inner: MediaStreamTrack) -> None:
        super().__init__()
        self.inner = inner
        self._silent = asyncio.Event()
        #: The avatar's presentation timeline: recorded in sync with the video.
        self.timeline = getattr(inner, "timeline", None)

    async def recv(self) -> Any:
        import av  # noqa: PLC0415 - only with --record

        from ..media import frame_rms  # noqa: PLC0415

        frame = await self.inner.recv()
        if (
            not self._silent.is_set()
            and isinstance(frame, av.AudioFrame)
            and frame_rms(frame) < SILENCE_LEVEL
        ):
            self._silent.set()
        return frame

    async def drained(self, bound: float) -> None:
        self._silent.clear()
        try:
            async with asyncio.timeout(bound):
                await self._silent.wait()
        except TimeoutError:
            pass  # the backend stopped sending frames: whatever came is in the file

    def stop(self) -> None:
        super().stop()


def _duration(path: Path) -> float:
    """Seconds of media in ``path`` (0 when the container does not say)."""
    import av  # noqa: PLC0415 - only with --audio

    with av.open(str(path)) as container:
        return float(container.duration or 0) / 1_000_000


class _Lines:
    """stdin lines for an asyncio loop, read on a daemon thread (a blocked read never holds
    up the exit, which a loop executor would). The lines stop at the end of stdin, or as
    soon as ``until`` is set (the session ended: no turn can be taken any more, and the
    command exits with stdin still open)."""

    def __init__(self, stream: IO[str], until: asyncio.Event) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[str | None] = asyncio.Queue()
        self._until = until
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        for raw in stream:
            if not self._put(raw.rstrip("\r\n")):
                return
        self._put(None)

    def _put(self, line: str | None) -> bool:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, line)
        except RuntimeError:  # the loop has closed: the command is over
            return False
        return True

    async def _next(self) -> str | None:
        """The next line; None at the end of stdin or once ``until`` is set."""
        if self._until.is_set():
            return None
        line = asyncio.ensure_future(self._queue.get())
        ended = asyncio.ensure_future(self._until.wait())
        try:
            await asyncio.wait((line, ended), return_when=asyncio.FIRST_COMPLETED)
        finally:
            ended.cancel()
            if not line.done():
                line.cancel()
        return line.result() if line.done() and not line.cancelled() else None

    async def __aiter__(self) -> AsyncIterator[str]:
        while (line := await self._next()) is not None:
            if line.strip():
                yield line.strip()


class Talk:
    """One ``talk`` run."""

    def __init__(self, opts: TalkOptions, *, stdin: IO[str] | None = None) -> None:
        self.opts = opts
        self.stdin = stdin or sys.stdin
        self.start = time.monotonic()
        self.session: AvatarSession | None = None
        self.ended: dict[str, Any] | None = None
        self.interrupted: int | None = None
        self.recorder: Recorder | None = None
        self.played: _Played | None = None
        self.heard: _Heard | None = None
        self.printer: ConversationPrinter | None = None
        self.greeting: Any = None
        #: While connecting, the transcript holds back ``error`` and ``ended``: a failed
        #: connect is told once, on stderr (:meth:`_connect`), not among the transcript.
        self.held: list[Event] | None = None
        #: Set at each start of an answer (or of the user's heard speech), for --audio.
        self.activity = asyncio.Event()
        #: Set when the session ends (its ``ended`` event): stdin is no longer read.
        self.over = asyncio.Event()

    # -- output ------------------------------------------------------------------------------
    def error(self, text: str) -> None:
        if self.printer is not None:
            self.printer.end_line()
        print(f"avatar-sdk: {text}", file=sys.stderr, flush=True)

    def note(self, text: str, style: str = "dim") -> None:
        if self.printer is not None:
            self.printer.status(text, style, time.monotonic())
        else:  # --json: stdout carries events only
            print(f"avatar-sdk: {text}", file=sys.stderr, flush=True)

    # -- the run -----------------------------------------------------------------------------
    async def run(self) -> int:
        """The exit code of the whole run (see :data:`.exits.TABLE`)."""
        loop = asyncio.get_running_loop()
        work = asyncio.ensure_future(self._converse())
        handled: list[int] = []
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(signum, self._interrupt, signum, work, handled)
                handled.append(signum)
        try:
            code = await work
            if self.interrupted is None:
                return code
            # Interrupted just as the work finished: the signal still decides the code.
            return exits.INTERRUPTED if self.interrupted == signal.SIGINT else exits.TERMINATED
        except asyncio.CancelledError:
            if self.interrupted is None:
                raise
            return exits.INTERRUPTED if self.interrupted == signal.SIGINT else exits.TERMINATED
        finally:
            for handled_signum in handled:
                loop.remove_signal_handler(handled_signum)  # a second Ctrl-C stops at once
            await self._finish()

    def _interrupt(self, signum: int, work: asyncio.Future[int], handled: list[int]) -> None:
        if self.interrupted is None:
            self.interrupted = signum
            self.error("interrupted: closing the session")
            work.cancel()
        loop = asyncio.get_running_loop()
        for handled_signum in handled:
            loop.remove_signal_handler(handled_signum)
        handled.clear()

    async def _finish(self) -> None:
        """Stop recording, close (completing the thread): bounded by ``close_timeout``."""
        if self.recorder is not None:
            # Bounded, but the file is closed even when the bound cuts the stop short.
            with best_effort("stopping the recording", _log()):
                async with asyncio.timeout(self.opts.config.close_timeout):
                    await self.recorder.stop()
            self._report_recording(self.recorder)
        if self.session is not None:
            await self.session.close()

    def _report_recording(self, recorder: Recorder) -> None:
        """Say what the file holds: "recorded" only when it holds the avatar's media."""
        if recorder.failure is not None:
            self.error(
                f"recording failed ({recorder.failure}); {self.opts.record} holds what was"
                " recorded before"
            )
        elif not any(recorder.frames.values()):
            self.error(f"nothing recorded: no avatar media arrived for {self.opts.record}")
        else:
            self.note(f"recorded {self.opts.record}")

    async def _converse(self) -> int:
        opts = self.opts
        if opts.thread_id is not None:
            holders = await default_leases().others_alive_async(opts.thread_id)
            if holders:
                self.error(
                    f"thread {opts.thread_id} is held by {holders} other live process(es);"
                    " end that conversation first"
                )
                return exits.THREAD_HELD
        code = await self._connect()
        if code is not None:
            return code
        session = self.session
        assert session is not None
        if opts.record is not None:
            await self._start_recording(session)
        try:
            await self.exchange(session)
            if self.heard is not None:
                await self.heard.drained(AUDIO_DRAIN)  # the last words reach the file
        except AvatarError as error:
            if self.ended is None and error.code is not ErrorCode.CLOSED:
                self.error(str(error))  # a turn the session refused (e.g. too long)
                await session.close()
                return exits.for_error(error)
        if self.ended is None:
            await session.close()
        return exits.for_ending(self.ended or {"reason": "closed"})

    async def _until_quiet(self, session: AvatarSession) -> None:
        """Until the avatar has said all it was saying (bounded by ``reply_timeout``):
        a turn sent earlier would interrupt it, a close would cut its last words."""
        try:
            await session.wait_until_quiet(timeout=self.opts.reply_timeout)
        except TimeoutError:
            self.note(f"the avatar was still talking after {self.opts.reply_timeout:g} s", "yellow")

    def _build(self) -> AvatarSession:
        opts = self.opts
        session = AvatarSession(
            opts.url,
            opts.token,
            genie_url=opts.genie_url,
            thread_id=opts.thread_id,
            audio=self.uplink(),
            video=opts.video,
            media=opts.media,
            config=opts.config,
            allow_insecure_transport=opts.insecure,
            ca_file=opts.ca_file,
            record=opts.cassette,
        )
        if opts.json:
            session.on("*", JsonPrinter(self.start).on_event)  # every event, for scripts
        else:
            self.printer = ConversationPrinter(
                Screen(), self.start, thread_of=lambda: session.thread_id
            )
            self.held = []
            session.on("*", self._show)
        session.on("*", self._track)
        # Registered before connect(): the greeting may be over before connect() returns.
        self.greeting = session.expect("agent_turn_ended")
        return session

    def uplink(self) -> MediaStreamTrack | None:
        """The audio the session sends: the ``--audio`` file, else none (``--voice``
        sends the microphone: :mod:`.voice`)."""
        if self.opts.audio is None:
            return None
        from ..media import file_source  # noqa: PLC0415 - only with --audio

        self.played = _Played(file_source(self.opts.audio))
        return self.played

    async def exchange(self, session: AvatarSession) -> None:
        """The conversation once connected: the greeting, then the turns (``--voice``
        talks instead: :mod:`.voice`)."""
        await self._turns(session)

    def _show(self, event: Event) -> None:
        if self.held is not None and event.name in ("error", "ended"):
            self.held.append(event)
        elif self.printer is not None:
            self.printer.on_event(event)

    def _release(self, failure: AvatarError | None) -> None:
        """Connect is over: print what was held back, except what the stderr line of the
        ``failure`` tells (its ``error`` event, the ``ended`` that followed)."""
        held, self.held = self.held or [], None
        for event in held:
            told = failure is not None and (
                event.name == "ended" or event.data.get("code") == str(failure.code)
            )
            if not told and self.printer is not None:
                self.printer.on_event(event)

    def _track(self, event: Event) -> None:
        """How the session ended, and whether the avatar is answering (for --audio)."""
        if event.name == "ended":
            self.ended = dict(event.data)
            self.over.set()
        elif event.name == "agent_speech_started" or (
            event.name == "user_transcription" and event.data.get("final")
        ):
            self.activity.set()

    async def _connect(self) -> int | None:
        """Connect, retrying errors a retry can fix; None when connected, else the exit code."""
        attempts = max(1, self.opts.connect_attempts)
        policy = RetryPolicy(max_attempts=attempts, initial=0.5, base=1.0, cap=10.0)
        for attempt in range(1, attempts + 1):
            self.ended = None
            self.over.clear()
            try:
                session = self.session = self._build()
            except AvatarError as error:  # the arguments (URL, --insecure, a file): usage
                self.error(error_line(error))
                return exits.USAGE
            try:
                await session.connect()
            except AvatarError as error:
                self._release(error)
                code = exits.for_error(error)
                if code != exits.GAVE_UP or attempt == attempts:
                    self.error(error_line(error, attempts=attempt))
                    return code
                delay = policy.delay(attempt)
                # One line for the whole run: the attempts are told with --verbose.
                _log().info("%s; retrying in %.1f s (%d/%d)", error, delay, attempt, attempts)
                await asyncio.sleep(delay)
            else:
                self._release(None)
                return None
        raise AssertionError("unreachable")  # pragma: no cover

    async def _start_recording(self, session: AvatarSession) -> None:
        from ..media import record_avatar  # noqa: PLC0415 - only with --record

        audio, video = session.avatar_audio, session.avatar_video
        if audio is None and video is None:
            self.error("nothing to record: the server sent no avatar media")
            return
        heard = self.heard = _Heard(audio) if audio is not None else None
        self.recorder = record_avatar(heard, video, self.opts.record or "")
        await self.recorder.start()

    async def _turns(self, session: AvatarSession) -> None:
        opts = self.opts
        # asyncio.timeout, never wait_for: on 3.11 wait_for swallows a cancellation (Ctrl-C)
        # that lands as the awaited event arrives, and the run would go on reading stdin.
        try:
            async with asyncio.timeout(opts.reply_timeout):
                await self.greeting
        except TimeoutError:
            self.note(f"no greeting within {opts.reply_timeout:g} s", "yellow")
        await self._until_quiet(session)  # the greeting is said to its end
        if opts.turns is not None:
            for text in opts.turns:
                await self._turn(session, text)
        elif opts.audio is None:
            async for text in _Lines(self.stdin, self.over):
                await self._turn(session, text)
        if self.played is not None:
            await self._audio_sent(session)

    async def _turn(self, session: AvatarSession, text: str) -> None:
        """One exchange, as a person takes it: ``session.ask()`` (sent once the avatar is
        quiet, answered by the reply to that turn), then until the answer has been said to
        its end. Each wait is bounded by ``reply_timeout``."""
        await self._until_quiet(session)  # so the transcript shows the question when it goes
        if self.printer is not None:
            self.printer.user(text, time.monotonic())
        try:
            await session.ask(text, timeout=self.opts.reply_timeout)
        except TimeoutError:
            self.note(f"no answer within {self.opts.reply_timeout:g} s", "yellow")
            return
        await self._until_quiet(session)

    async def _audio_sent(self, session: AvatarSession) -> None:
        """Wait until the file has been sent, then until the avatar has answered it (or
        stayed quiet for ``AUDIO_SETTLE``); all within ``reply_timeout`` past the file."""
        assert self.played is not None and self.opts.audio is not None
        bound = _duration(self.opts.audio) + self.opts.reply_timeout
        try:
            async with asyncio.timeout(bound):
                await self.played.done.wait()
                while True:
                    await session.wait_until_quiet()
                    self.activity.clear()
                    try:
                        async with asyncio.timeout(AUDIO_SETTLE):
                            await self.activity.wait()
                    except TimeoutError:
                        return  # quiet for AUDIO_SETTLE: nothing more is coming
        except TimeoutError:
            self.note(f"the audio and its answer took longer than {bound:g} s", "yellow")


def _log() -> Any:
    import logging  # noqa: PLC0415

    return logging.getLogger("avatar_sdk._cli.main")


def talk(opts: TalkOptions) -> int:
    """Run ``talk`` to its exit code (a second Ctrl-C during the close stops at once)."""
    try:
        return interrupts.run(Talk(opts).run())
    except KeyboardInterrupt:
        print("avatar-sdk: interrupted", file=sys.stderr)
        return exits.INTERRUPTED
