"""One client's conversation on the staging backend: the server side of a single socket.

A :class:`Conversation` holds what the real conversation manager keeps per client (joined,
approved, paused, muted, the running agent turn and its speechId, the turns it took or
dropped) and plays the agent's turns through the server's recovery buffer, honouring the
injected faults. Split from :mod:`.server`, which owns the sockets and routes events here.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ...wire.names import In
from .brain import Brain
from .state import CapPolicy, EmitFaults, Emitter, MediaRelease, Pacing
from .vad import UtteranceDetector


@dataclass
class ReceivedEvent:
    """A client emit as the server saw it."""

    sid: str
    event: str
    payload: Any
    at: float = field(default_factory=time.monotonic)


#: Triggers of agent turns a user turn cannot interrupt: the service ignores the barge-in
#: marker and drops a typed or spoken turn that arrives during one (PROTOCOL.md §4.13).
UNINTERRUPTIBLE_TRIGGERS = frozenset(
    {"approved-permissions", "resume-replay", "wake-up", "hangup-message"}
)


@dataclass
class TurnProgress:
    """How far one agent turn got on the wire: whether it began, what the avatar said."""

    started: bool = False
    finished: bool = False
    chunks: list[tuple[str, int]] = field(default_factory=list)
    talking_since: float | None = None

    def said(self, scale: float, now: float | None = None) -> str:
        """The words the avatar had finished saying by ``now`` (``time.monotonic()`` by
        default): the ``agentContent`` of a turn cut short (PROTOCOL.md §3.9).

        The avatar talks from ``stvStartedTalking`` on, each caption chunk for its
        ``durationMs`` (scaled by ``scale``), its words evenly spread over it, as the
        reference client's caption tracker times them (§3.7). Whole words only, so a cut
        before the first word ends reports nothing said: counting a chunk as said the
        moment it began gave a one-chunk answer's whole text for a cut at its first word.
        """
        if self.talking_since is None:
            return ""
        at_ms = (time.monotonic() if now is None else now) - self.talking_since
        elapsed_ms = at_ms / max(scale, 1e-6) * 1000.0
        said: list[str] = []
        start = 0.0
        for text, duration in self.chunks:
            words = text.split()
            for i, word in enumerate(words):
                if start + duration * (i + 1) / len(words) > elapsed_ms:
                    return " ".join(said)
                said.append(word)
            start += duration
        return " ".join(said)


@dataclass(frozen=True)
class ConversationContext:
    """What a conversation uses of the backend; the server builds one for all of them."""

    brain: Brain
    sio: Emitter
    faults: EmitFaults
    #: Server emits by event name (``staging.emitted``), counted as they go out.
    emitted: Counter[str]
    pacing: Pacing
    cap: CapPolicy
    #: User turns heard on each thread, across its server sessions (``staging.thread_memory``).
    thread_memory: dict[str, list[str]]
    #: Server sessions that reached the cap, by sid (``staging.expired_sids``).
    expired_sids: list[str]
    media: MediaRelease


class Conversation:
    """Server-side state of one client session (one Socket.IO sid)."""

    def __init__(self, context: ConversationContext, sid: str, *, debug_mode: bool = False) -> None:
        self.context = context
        self.sid = sid
        #: The socket asked for ``debugMode``: the ``debug_*`` streams are sent to it.
        self.debug_mode = debug_mode
        self.thread_id: str | None = None
        self.thread_announced = False
        self.room: str | None = None
        self.joined = False
        self.approved = False
        self.muted = False
        self.paused = False
        self.speaking = False
        self.current_speech: str | None = None
        self.turn_task: asyncio.Task[None] | None = None
        self.turn_progress: TurnProgress | None = None
        #: The running agent turn cannot be interrupted (the opening greeting).
        self.uninterruptible = False
        self._closing: asyncio.Task[None] | None = None
        self.turn_counter = itertools.count(1)
        #: User turns the server took (typed and spoken), in order; ``voice_turns``: spoken.
        self.user_turns: list[str] = []
        self.voice_turns: list[str] = []
        #: User turns the server dropped (a restarting agent, an uninterruptible turn).
        self.dropped_turns: list[str] = []
        self.agent_down = False
        self._restart: asyncio.TimerHandle | None = None
        self._detector: UtteranceDetector | None = None
        self._listening: set[asyncio.Task[None]] = set()
        self.ended = False
        #: The conversation cap's timer (``StagingServer(max_conversation_length=...)``).
        self._cap: asyncio.Task[None] | None = None
        #: When the cap's clock started (``approvedPermissions``), monotonic; and whether
        #: the cap was reached (``conversationTimeExpired`` sent).
        self.started_at: float | None = None
        self.expired = False

    async def emit(self, event: str, payload: Any) -> None:
        """Emit to this client through the recovery buffer, honouring latency and withholding."""
        context = self.context
        faults = context.faults
        if event in faults.withheld or self.ended:
            return
        if event.startswith("debug_") and not self.debug_mode:
            return
        if faults.added_latency:
            await asyncio.sleep(faults.added_latency)
        context.emitted[event] += 1
        await context.sio.emit_recoverable(self.sid, event, payload)

    def start_cap(self) -> None:
        """Start this server session's cap, if the server has one: the warning, then the
        expiry (``conversationTimeExpired`` + ``conversationEnded``), as the service does."""
        self.started_at = time.monotonic()
        cap = self.context.cap.conversation_cap()
        if cap is not None and self._cap is None:
            self._cap = asyncio.ensure_future(self._run_cap(*cap))

    async def _run_cap(self, cap: float, lead: float) -> None:
        await asyncio.sleep(max(0.0, cap - lead))
        if lead > 0:
            await self.emit(In.CONVERSATION_TIME_WARNING, {"remainingTime": lead})
            await asyncio.sleep(lead)
        if self.ended:
            return
        self.expired = True
        self.context.expired_sids.append(self.sid)
        self.cancel_turn()
        await self.emit(In.CONVERSATION_TIME_EXPIRED, {})
        await self.emit(In.CONVERSATION_ENDED, {})
        self.ended = True  # this server session takes nothing more
        await self.context.media.close_conversation(self.sid)

    def start_turn(
        self,
        trigger: str,
        user_text: str,
        *,
        speech_id: str | None = None,
        transcription: str | None = None,
    ) -> None:
        """Start an agent turn; one still running is cut short first, with its closing
        events (the new turn says nothing before they are out)."""
        self._cut_turn()
        self.uninterruptible = trigger in UNINTERRUPTIBLE_TRIGGERS
        self.turn_progress = progress = TurnProgress()
        self.turn_task = asyncio.ensure_future(
            self._run_turn(trigger, user_text, progress, speech_id, transcription)
        )

    def cancel_turn(self) -> None:
        """Stop the running turn silently (the agent process is gone, or the session is)."""
        if self.turn_task is not None and not self.turn_task.done():
            self.turn_task.cancel()
        self.turn_task = None
        self.turn_progress = None
        self.uninterruptible = False

    def _cut_turn(self) -> asyncio.Task[None] | None:
        """Stop the running turn; a turn the client saw begin gets its closing events
        (``agentInterrupted``, then ``stvFinishedTalking`` with what was said) from the
        returned task. A client never sees a turn end without them."""
        task, progress = self.turn_task, self.turn_progress
        self.turn_task = self.turn_progress = None
        self.uninterruptible = False
        if task is None or task.done() or progress is None:
            return self._closing
        task.cancel()
        self._closing = asyncio.ensure_future(self._close_cut(task, progress, self._closing))
        return self._closing

    async def _close_cut(
        self,
        task: asyncio.Task[None],
        progress: TurnProgress,
        before: asyncio.Task[None] | None,
    ) -> None:
        for earlier in (before, task):
            if earlier is not None and not earlier.done():
                await asyncio.wait({earlier})  # never cancels it
        self.speaking = False
        if progress.started and not progress.finished:
            progress.finished = True
            said = progress.said(self.context.pacing.speech_time_scale)
            await self.emit(In.AGENT_INTERRUPTED, {})
            await self.emit(In.STV_FINISHED_TALKING, {"agentContent": said})

    async def _run_turn(
        self,
        trigger: str,
        user_text: str,
        progress: TurnProgress,
        speech_id: str | None = None,
        transcription: str | None = None,
    ) -> None:
        closing = self._closing
        if closing is not None and not closing.done():
            await asyncio.wait({closing})  # the cut turn's closing events go out first
        brain = self.context.brain
        memory = self.context.thread_memory.get(self.thread_id or "", [])
        plan = brain.next_plan(user_text, memory) if trigger == "transcript" else None
        text = brain.greeting if plan is None else (plan.text or "")
        speech_id = speech_id or brain.speech_id_for(trigger, user_text)
        self.current_speech = speech_id
        turn_id = f"turn-{next(self.turn_counter)}"
        thread = None if self.thread_announced else self.thread_id
        events = brain.turn_events(
            speech_id=speech_id,
            turn_id=turn_id,
            text=text,
            thread_id=thread,
            tool_calls=plan.tool_calls if plan else None,
            user_transcription=transcription,
        )
        if plan is not None and plan.stall:
            await asyncio.sleep(plan.stall)
        # The event after which the client may talk again: the end of speech, or of
        # generation for a turn that says nothing.
        last = In.STV_FINISHED_TALKING if text else In.STV_FINISHED_GENERATING
        try:
            for event, payload in events:
                if event == In.STV_STARTED_TALKING:
                    self.speaking = True
                elif event == In.STV_SPEECH_CHUNK:
                    progress.chunks.append((payload["text"], int(payload["durationMs"])))
                elif event == In.STV_FINISHED_TALKING:
                    # The avatar talks for as long as its captions last (scaled for tests).
                    spoken = sum(duration for _, duration in progress.chunks)
                    await asyncio.sleep(spoken / 1000.0 * self.context.pacing.speech_time_scale)
                    self.speaking = False
                if event == last:
                    # Interruptible again before the client hears the end, so a turn it
                    # held until then is never dropped.
                    progress.finished = True
                    if self.turn_progress is progress:
                        self.uninterruptible = False
                await self.emit(event, payload)
                if event == In.AGENT_START_SPEECH:
                    progress.started = True
                elif event == In.STV_STARTED_TALKING:
                    progress.talking_since = time.monotonic()
                if thread is not None and event == In.AGENT_RAW_TEXT:
                    # Announced once it was really sent: a turn cut short by a barge-in
                    # before its first segment leaves the next turn to carry the thread.
                    self.thread_announced = True
                    thread = None
                await asyncio.sleep(self.context.pacing.event_spacing)
        except asyncio.CancelledError:
            self.speaking = False
            raise
        finally:
            if self.turn_progress is progress:
                self.uninterruptible = False

    def hear(self, rms: float, seconds: float) -> None:
        """One decoded uplink frame, for the utterance detector (``brain.listen``)."""
        brain = self.context.brain
        config = brain.listening
        if config is None or self.ended or not self.approved:
            self._detector = None
            return
        if self._detector is None or self._detector.config is not config:
            self._detector = UtteranceDetector(config)
        verdict = self._detector.feed(rms, seconds)
        if verdict is None:
            return
        work = self.user_onset() if verdict == "onset" else self._heard(brain.next_transcript())
        task = asyncio.ensure_future(work)
        self._listening.add(task)
        task.add_done_callback(self._listening.discard)

    async def _heard(self, text: str) -> None:
        await self.voice_turn(text, onset=False)

    async def user_onset(self) -> None:
        """The server's VAD hears the user start talking: ``userStartedTalking``, and a
        talking avatar is interrupted (unless its turn is uninterruptible)."""
        await self.emit(In.USER_STARTED_TALKING, {})
        await self.barge_in()

    async def barge_in(self) -> None:
        """The barge-in marker: a turn in progress is cut short with its closing events,
        unless it is uninterruptible (then the marker is ignored)."""
        if self.uninterruptible:
            return
        closing = self._cut_turn()
        if closing is not None and not closing.done():
            await asyncio.wait({closing})

    async def voice_turn(self, text: str, *, onset: bool = True) -> bool:
        """The service's speech recognition finalised the utterance ``text`` (see
        :meth:`Brain.voice_turn`); ``onset=False``: its VAD onset was already played. False
        if the server dropped it."""
        brain = self.context.brain
        spacing = self.context.pacing.event_spacing
        if onset:
            await self.user_onset()
        if self.uninterruptible or self.agent_down:
            self.dropped_turns.append(text)
            return False
        speech_id = brain.speech_id_for("transcript", text)
        for event, payload in brain.asr_events(text, speech_id):
            await self.emit(event, payload)
            await asyncio.sleep(spacing)
        self.user_turns.append(text)
        self.voice_turns.append(text)
        self.remember(text)
        self.start_turn("transcript", text, speech_id=speech_id, transcription=text)
        return True

    def remember(self, text: str) -> None:
        """A user turn heard here: kept in its thread's memory (across server sessions)."""
        if self.thread_id:
            self.context.thread_memory.setdefault(self.thread_id, []).append(text)

    def schedule_agent_restart(self, delay: float) -> None:
        """The agent comes back after ``delay`` and says so with ``showAgent``."""

        def back() -> None:
            self.agent_down = False
            if not self.ended:
                task = asyncio.ensure_future(self.emit(In.SHOW_AGENT, {}))
                task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)

        self._restart = asyncio.get_running_loop().call_later(delay, back)

    @property
    def tasks(self) -> list[asyncio.Task[None]]:
        """The turn tasks still to be awaited (the running turn, a cut turn's closing)."""
        running = (self.turn_task, self._closing, self._cap, *self._listening)
        return [t for t in running if t is not None]

    def close(self) -> None:
        self.ended = True
        self.cancel_turn()
        if self._closing is not None and not self._closing.done():
            self._closing.cancel()
        for task in self._listening:
            task.cancel()
        if self._cap is not None and self._cap is not asyncio.current_task():
            self._cap.cancel()
        if self._restart is not None:
            self._restart.cancel()
