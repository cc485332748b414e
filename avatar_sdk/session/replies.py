"""Speech handles: what ``speak()`` returns, and the reply each user turn gets.

The I/O glue around the pure matching of :mod:`avatar_sdk.session.core.reply_match`. One
:class:`Replies` per session subscribes to its conversation events, keeps the
:class:`~avatar_sdk.session.core.reply_match.Floor` and feeds a
:class:`~avatar_sdk.session.core.reply_match.ReplyMatch` per :class:`SpeechHandle` in flight (and,
with media, the avatar voice's audible onsets); ``ask()`` is ``speak()`` after the floor is
free, then ``await handle.reply()``: one implementation of reply matching.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, Final

from ..clock import Clock, Timer, sleep_or
from ..errors import AvatarError, ErrorCode
from ..guards.brain import SPIRAL_RECOVERY_PREFIX
from ..logs import sdk_logger
from .core.latency import PlayoutClock, PlayoutEnd
from .core.reply_match import (
    AUDIO_GRACE,
    PLAYOUT_CAP,
    TALK_START_GRACE,
    Floor,
    Onset,
    Reply,
    ReplyMatch,
)

if TYPE_CHECKING:
    from ..events.bus import Event

log = sdk_logger("avatar_sdk.session")

__all__ = ["Replies", "SpeechHandle"]

#: Handles whose reply is still followed, at most; the oldest is let go first (its
#: ``reply()`` raises ``invalid_state``), so turns nobody awaits cost nothing forever.
MAX_LIVE_HANDLES: Final = 64
#: Speech ids remembered as seen (never the reply of a turn registered after them).
SEEN_SPEECH_IDS: Final = 256
#: The events a reply is made of.
REPLY_EVENTS: Final = (
    "agent_speech_started",
    "agent_text",
    "agent_turn_ended",
    "agent_talking",
    "agent_interrupted",
    "caption",
)
#: An avatar audio frame louder than this RMS (full scale 1.0) is speech.
AUDIBLE_RMS: Final = 0.01
#: Quiet avatar frames in a row that mean its voice is over on this side (100 ms of 20 ms
#: frames): the media path lags the control channel, so a reply said to its end on the
#: server may still be heard here for a jitter buffer or so.
QUIET_FRAMES: Final = 5


class SpeechHandle:
    """One user turn, from ``speak()`` on (like LiveKit's ``SpeechHandle``).

    ``await handle`` (and so ``await session.speak(text)``) returns once the turn was
    written to the socket, raising ``AvatarError`` as ``speak()`` always did; it returns
    the handle. ``await handle.reply(timeout=...)`` is the avatar's :class:`Reply` to this
    turn once its agent turn ended; ``await handle.wait_for_playout(timeout=...)`` once
    the avatar finished saying it and, with media, its voice finished playing here
    (``played_latency``). Cancelling any of these awaits leaves the turn alone.
    """

    def __init__(
        self,
        text: str,
        number: int,
        clock: Clock,
        match: ReplyMatch,
        *,
        source: str = "speak",
        on_final: Callable[[SpeechHandle], None] | None = None,
        playout_delay: Callable[[], float] | None = None,
    ) -> None:
        self._text = text
        self.id = number
        self._clock = clock
        self._match = match
        #: ``speak`` (a typed turn) or ``voice`` (the user spoke into the uplink).
        self.source = source
        self._on_final = on_final
        self._playout_delay = playout_delay
        self._playout: PlayoutEnd | None = None
        self._reported = False
        loop = asyncio.get_running_loop()
        self._sent: asyncio.Future[None] = loop.create_future()
        self._sent.add_done_callback(_retrieve)
        self._changed = asyncio.Event()
        self._error: AvatarError | None = None
        self._onset: Onset | None = None
        self._linger: Timer | None = None
        self._settle: Timer | None = None
        self._audio_wanted = False
        self.waited = 0.0

    def __repr__(self) -> str:
        state = "failed" if self._error else "done" if self.done() else "live"
        return f"<SpeechHandle #{self.id} {state} turn_id={self.turn_id!r}>"

    # -- what it is -------------------------------------------------------------------------
    @property
    def text(self) -> str:
        """The turn as sent (or to be sent)."""
        return self._match.question or self._text

    @property
    def speech_id(self) -> str | None:
        """The speechId the server minted for the turn, once its reply began."""
        return self._match.speech_id

    @property
    def turn_id(self) -> str | None:
        """The agent turn id of the reply, once it began (None before)."""
        return self._match.turn_ids[0] if self._match.turn_ids else None

    @property
    def is_sent(self) -> bool:
        return self._sent.done() and self._sent.exception() is None

    @property
    def interrupted(self) -> bool:
        """The reply was cut short (so far)."""
        return self._match.interrupted_by is not None

    def done(self) -> bool:
        """True once the avatar finished saying the reply (with media: and its voice
        finished playing here), or the turn failed."""
        return (
            self._error is not None
            or self._finished()
            or (self._sent.done() and self._sent.exception() is not None)
        )

    def _finished(self) -> bool:
        """Said, and with media its playout over (heard to its end, or given up on)."""
        return self._match.said and (self._playout is None or self._playout.done)

    # -- waiting ----------------------------------------------------------------------------
    def __await__(self) -> Generator[Any, None, SpeechHandle]:
        yield from self.sent().__await__()
        return self

    async def sent(self) -> None:
        """Return once the turn was written to the socket (a turn held during a recovery or
        the greeting: once it went out); ``AvatarError`` if the session ended first."""
        await asyncio.shield(self._sent)

    async def reply(self, *, timeout: float | None = 30.0) -> Reply:
        """The reply to this turn once its agent turn ended (with media, also its first
        audible frame, or :data:`~avatar_sdk.session.core.reply_match.AUDIO_GRACE` after the avatar
        finished saying it).

        ``timeout`` (seconds, session clock; None: no limit) counts from this call:
        ``TimeoutError`` when it passes. ``AvatarError`` when the session ends or fails
        first (its code: ``closed``, ``server_ended``, or the failure's)."""
        deadline = None if timeout is None else self._clock.monotonic() + _seconds(timeout)
        await self._until(lambda: self._match.ended or self._match.said, deadline)
        if self._audio_wanted and self._match.spoke and self._match.audio_at is None:
            # Its voice lags the control channel (more so on a loaded machine): it is heard
            # while the avatar says the reply, or soon after; AUDIO_GRACE past the end of
            # the saying (at most PLAYOUT_CAP for a backend that never says it ended).
            match, clock = self._match, self._clock
            with contextlib.suppress(TimeoutError):  # complete; its voice was not heard
                cap = clock.monotonic() + PLAYOUT_CAP
                await self._until(
                    lambda: match.audio_at is not None or match.said,
                    cap if deadline is None else min(cap, deadline),
                )
                grace = clock.monotonic() + AUDIO_GRACE
                await self._until(
                    lambda: match.audio_at is not None,
                    grace if deadline is None else min(grace, deadline),
                )
        return self._match.snapshot(waited=self.waited)

    async def wait_for_playout(self, *, timeout: float | None = 60.0) -> Reply:
        """The reply once the avatar finished saying it (``agent_talking`` false, or its
        turn ended with nothing to say) and, with media, once its voice finished playing
        here (its last audible frame handed to the application, followed by quiet; at most
        :data:`~avatar_sdk.session.core.reply_match.AUDIO_GRACE` after the saying ended):
        ``interrupted`` and ``played_latency`` are then final."""
        deadline = None if timeout is None else self._clock.monotonic() + _seconds(timeout)
        await self._until(self._finished, deadline)
        return self._match.snapshot(waited=self.waited)

    async def _until(self, ready: Callable[[], bool], deadline: float | None) -> None:
        await self.sent()
        while not ready():
            if self._error is not None:
                raise self._error
            left = None if deadline is None else deadline - self._clock.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(f"no reply to turn #{self.id} in time")
            self._changed.clear()
            if left is None:
                await self._changed.wait()
            else:
                await sleep_or(self._clock, left, self._changed)

    # -- fed by the session -----------------------------------------------------------------
    def _on_sent(self, text: str) -> None:
        self._match.sent(text, self._clock.monotonic())
        self._changed.set()

    def _resolve_sent(self, error: BaseException | None) -> None:
        if self._sent.done():
            return
        if error is None:
            self._sent.set_result(None)
        else:
            self._sent.set_exception(error)
        self._changed.set()

    def _feed(self, event: Event) -> None:
        match = self._match
        was_ended, was_said = match.ended, match.said
        match.feed(event.name, event.data, event.at)
        if match.ended and not was_ended:
            if not match.spoke:
                match.settle(event.at)  # nothing to say: nothing to play
            elif match.talking_at is None:
                self._settle = self._clock.call_later(TALK_START_GRACE, self._no_talking)
        if match.said and not was_said:
            self._on_said(event.at)
        self._changed.set()
        self._check_final()

    def _on_said(self, at: float) -> None:
        if self._playout is None:
            return
        self._playout.said(at)
        if not self._match.spoke:
            self._disarm()  # nothing to say: nothing to hear, played once said
            return
        # Its voice may still be on its way (the media path lags the control channel):
        # the onset and the playout stay armed AUDIO_GRACE longer.
        self._linger = self._clock.call_later(AUDIO_GRACE, self._disarm)

    def _no_talking(self) -> None:
        if self._match.talking_at is None and not self._match.said:
            self._match.settle(self._clock.monotonic())
            if self._playout is not None:
                self._playout.said(self._clock.monotonic())
            self._disarm()
            self._changed.set()
            self._check_final()

    def _close_playout(self) -> None:
        playout = self._playout
        if playout is None or self._match.played:
            return
        playout.give_up()
        at = playout.at
        if at is not None and self._playout_delay is not None:
            at += max(0.0, self._playout_delay())
        self._match.playout(at)
        self._changed.set()

    def _check_final(self) -> None:
        """Once its figures are final (with media: said, and played or given up on; with
        none: generated, there is no playout), tell the session (``turn_latency``), once."""
        if self._reported or self._error is not None or self._on_final is None:
            return
        if self._match.sent_at is None or self._listening():
            return
        match = self._match
        if self._playout is None:  # no playout: final once generated (or cut short)
            if not (match.ended or match.said):
                return
        elif not self._finished():
            return
        self._reported = True
        self._on_final(self)

    def _restart(self) -> None:
        """The turn was resent after a recovery: the resent turn's reply is the reply."""
        self._match.restart()
        self._match.sent(self._match.question or self._text, self._clock.monotonic())
        if self._audio_wanted:
            self._arm_audio()
        self._changed.set()

    def _arm_audio(self) -> None:
        self._audio_wanted = True
        self._onset = Onset(AUDIBLE_RMS)
        self._playout = PlayoutEnd(AUDIBLE_RMS, QUIET_FRAMES)

    def _disarm(self) -> None:
        self._onset = None
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        if self._settle is not None:
            self._settle.cancel()
            self._settle = None
        if self._playout is not None and self._match.said:
            self._close_playout()
        self._check_final()

    def _listening(self) -> bool:
        """Still reading the avatar's voice for this reply: its onset, or its playout."""
        if self._match.sent_at is None:
            return False
        playing = self._playout is not None and not self._match.played
        return self._onset is not None or (playing and self._error is None)

    def _level(self, level: float, at: float) -> None:
        onset = self._onset
        if onset is not None and onset.feed(level, at):
            self._match.audio(at)
            self._onset = None
            self._changed.set()
        playout = self._playout
        heard = playout is not None and self._match.audio_at is not None and not playout.done
        if heard and playout is not None and playout.feed(level, at):
            self._close_playout()
            if self._linger is not None:
                self._linger.cancel()
                self._linger = None
            self._check_final()

    def _cut(self, cause: str) -> None:
        """Its reply was being said on a server session that is gone (see
        :meth:`ReplyMatch.cut`): said now; what of its voice already arrived still plays."""
        if self._error is not None or self._match.said:
            return
        now = self._clock.monotonic()
        self._match.cut(cause, now)
        if self._match.said:
            self._on_said(now)
        self._changed.set()
        self._check_final()

    def _fail(self, error: AvatarError) -> None:
        if self._error is None and not self._match.said:
            self._error = error
        self._resolve_sent(error)
        self._disarm()
        self._changed.set()


def _retrieve(fut: asyncio.Future[None]) -> None:
    """A turn nobody awaited failed: logged, never "exception was never retrieved"."""
    if not fut.cancelled() and fut.exception() is not None:
        log.debug("a turn nobody awaited failed: %s", type(fut.exception()).__name__)


def _seconds(value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise AvatarError(
            ErrorCode.INVALID_ARGUMENT, f"timeout must be seconds >= 0 or None ({value!r})"
        )
    return float(value)


class Replies:
    """The session's speech handles and its floor (see the module docstring)."""

    def __init__(
        self,
        *,
        clock: Clock,
        on: Callable[[str, Callable[[Event], None]], object],
        audio: Any = None,
        emit: Callable[[str, dict[str, Any]], object] | None = None,
    ) -> None:
        self._clock = clock
        self._emit = emit
        #: What plays the avatar's voice beyond the application reading its frames (a
        #: speaker sink): its delay is added to ``played_latency``. None: the frames
        #: handed to the application are the playout.
        self.playout_clock: PlayoutClock | None = None
        self.floor = Floor()
        self._floor_changed = asyncio.Event()
        self._seen: dict[str, None] = {}
        self._live: list[SpeechHandle] = []
        self._numbers = itertools.count(1)
        self._ended: AvatarError | None = None
        self._audio = audio
        self._quiet_run: int | None = None  # counting quiet frames while an ask waits
        self._quiet = asyncio.Event()
        for name in REPLY_EVENTS:
            on(name, self._on_event)
        on("turn_resent", self._on_resent)
        on("spiral_recovered", self._on_spiral)
        on("user_started_talking", lambda _event: self.note_user("user_voice"))
        if audio is not None:
            audio.on_frame = self._on_frame
            audio.tap_wants = self._wants_frames

    # -- handles ----------------------------------------------------------------------------
    def register(self, text: str, *, media: bool) -> SpeechHandle:
        """A handle for a turn about to be spoken (before it is sent: nothing missed)."""
        match = ReplyMatch(stale=frozenset(self._seen))
        handle = self._handle(text, match, "speak")
        if media and self._audio is not None:
            handle._arm_audio()
        self._add(handle)
        return handle

    def _handle(self, text: str, match: ReplyMatch, source: str) -> SpeechHandle:
        return SpeechHandle(
            text,
            next(self._numbers),
            self._clock,
            match,
            source=source,
            on_final=self._final,
            playout_delay=self._playout_delay,
        )

    def _add(self, handle: SpeechHandle) -> None:
        self._live.append(handle)
        if len(self._live) > MAX_LIVE_HANDLES:
            oldest = self._live.pop(0)
            oldest._fail(
                AvatarError(ErrorCode.INVALID_STATE, "too many turns in flight to follow its reply")
            )

    def _playout_delay(self) -> float:
        clock = self.playout_clock
        return 0.0 if clock is None else float(clock.playout_delay())

    # -- spoken turns -----------------------------------------------------------------------
    def user_speech_started(self) -> None:
        """The user (re)started speaking into the uplink: an end of speech found before,
        whose answer has not begun, was a pause, not the end of their turn."""
        for handle in [h for h in self._live if h.source == "voice" and not h._match.adopted]:
            self._live.remove(handle)
            handle._disarm()

    def user_speech_ended(self, at: float, duration: float) -> None:
        """The user's speech into the uplink ended at ``at`` (session clock; found
        ``now - at`` later, past the detector's hangover): a spoken turn whose figures
        count from there (``voice_to_voice``). ``user_speech_ended`` is emitted."""
        if self._ended is not None:
            return
        if self._emit is not None:
            lag = max(0.0, self._clock.monotonic() - at)
            self._emit("user_speech_ended", {"duration": duration, "detected_after": lag})
        if self._audio is None:
            return
        match = ReplyMatch(stale=frozenset(self._seen), any_reply=True)
        handle = self._handle("", match, "voice")
        handle._arm_audio()
        match.sent("", at)
        handle._resolve_sent(None)
        self._add(handle)

    def _final(self, handle: SpeechHandle) -> None:
        """A turn's figures are final: the ``turn_latency`` event carries them, under the
        names of :mod:`~avatar_sdk.session.core.latency` (a unit test holds them equal)."""
        if handle in self._live and handle.done() and not handle._listening():
            self._live.remove(handle)
        if self._emit is None:
            return
        reply = handle._match.snapshot(waited=handle.waited)
        voice = handle.source == "voice"
        self._emit(
            "turn_latency",
            {
                "source": handle.source,
                "speech_id": reply.speech_id,
                "text_latency": reply.text_latency,
                "audio_latency": reply.audio_latency,
                "generated_latency": reply.generated_latency,
                "played_latency": reply.played_latency,
                "voice_to_voice": reply.audio_latency if voice else None,
                "interrupted": reply.interrupted,
            },
        )

    def note_user(self, cause: str) -> None:
        """A user turn or barge-in: a reply in flight that is cut next was cut by it."""
        for handle in self._live:
            handle._match.note_user(cause)

    def fail_all(self, error: AvatarError) -> None:
        """The session ended: every handle in flight and every wait for the floor fails."""
        self._ended = error
        self.floor.reset()
        self._floor_changed.set()
        live, self._live = self._live, []
        for handle in live:
            handle._fail(error)

    def awaiting(self) -> int:
        """Turns sent whose reply has not ended yet (a renewal waits for none)."""
        return sum(
            1
            for h in self._live
            if h.source == "speak" and h.is_sent and not h._match.ended and h._error is None
        )

    def cut(self) -> list[str]:
        """A renewal's swap cut the agent turn in progress (its old server session is
        gone): the floor is free, a reply generated but still being said counts as said
        then (``interrupted_by`` ``"renewal"``), and the texts of the turns whose reply had
        not ended are returned, to be asked again on the new server session."""
        self.floor.reset()
        self._floor_changed.set()
        for handle in self._live:
            if handle._match.ended:
                handle._cut("renewal")  # generated, but its saying ended with that session
        return [
            h._match.question or h.text
            for h in self._live
            if h.source == "speak" and h.is_sent and not h._match.ended and h._error is None
        ]

    # -- the floor --------------------------------------------------------------------------
    @property
    def ended(self) -> AvatarError | None:
        """The error the session ended with, once it did."""
        return self._ended

    async def until_free(self, deadline: float, gate_open: Callable[[], bool]) -> None:
        """Until no agent turn holds the floor and ``gate_open()`` (the server takes typed
        turns); ``TimeoutError`` at ``deadline`` (session clock), ``AvatarError`` if the
        session ends meanwhile. Re-checked at every conversation event."""
        clock = self._clock
        while True:
            if self._ended is not None:
                raise self._ended
            now = clock.monotonic()
            if gate_open() and not self.floor.busy(now):
                return
            left = deadline - now
            if left <= 0:
                raise TimeoutError("the avatar kept the floor")
            recheck = self.floor.recheck_in(now)
            self._floor_changed.clear()
            await sleep_or(
                clock, left if recheck is None else min(left, recheck), self._floor_changed
            )

    async def until_quiet(self, deadline: float) -> None:
        """With media: until the avatar's voice is quiet on this side (:data:`QUIET_FRAMES`
        quiet frames in a row), at most :data:`AUDIO_GRACE` or until ``deadline``; at once
        without media. The control channel says a reply was said before its last audio
        arrives here; a question sent now would be heard as one voice with it."""
        if self._audio is None or self._ended is not None:
            return
        limit = min(deadline, self._clock.monotonic() + AUDIO_GRACE) - self._clock.monotonic()
        if limit <= 0:
            return
        self._quiet_run = 0
        self._quiet.clear()
        try:
            await sleep_or(self._clock, limit, self._quiet)
        finally:
            self._quiet_run = None

    # -- events -----------------------------------------------------------------------------
    def _on_event(self, event: Event) -> None:
        self.floor.feed(event.name, event.data, event.at)
        self._floor_changed.set()
        speech_id = event.data.get("speech_id")
        for handle in list(self._live):
            handle._feed(event)
            if handle.done() and not handle._listening() and handle in self._live:
                self._live.remove(handle)
        if isinstance(speech_id, str) and speech_id not in self._seen:
            self._seen[speech_id] = None
            if len(self._seen) > SEEN_SPEECH_IDS:
                del self._seen[next(iter(self._seen))]

    def _on_resent(self, event: Event) -> None:
        text = event.data.get("text")
        for handle in self._live:
            if handle._match.question == text and not handle._match.ended:
                handle._restart()

    def _on_spiral(self, event: Event) -> None:
        text = event.data.get("text")
        for handle in self._live:
            if handle._match.question == text and not handle._match.ended:
                handle._restart()
                handle._match.also_answers(f"{SPIRAL_RECOVERY_PREFIX}{text}")

    def _wants_frames(self) -> bool:
        """A reply is awaited (its onset) or a quiet stretch counted: the voice is needed."""
        return self._quiet_run is not None or any(h._listening() for h in self._live)

    def _on_frame(self, frame: Any) -> None:
        listening = [h for h in self._live if h._listening()]
        if not listening and self._quiet_run is None:
            return
        from ..media import frame_rms  # noqa: PLC0415 - PyAV only with media

        try:
            level = frame_rms(frame)
        except Exception as exc:  # a frame it cannot read: no onset from it
            log.debug("avatar frame level unreadable: %s", type(exc).__name__)
            return
        at = self._clock.monotonic()
        if self._quiet_run is not None:
            self._quiet_run = self._quiet_run + 1 if level <= AUDIBLE_RMS else 0
            if self._quiet_run >= QUIET_FRAMES:
                self._quiet.set()
        for handle in listening:
            handle._level(level, at)
            if handle.done() and not handle._listening() and handle in self._live:
                self._live.remove(handle)
