"""Which agent turn answers which user turn, and when the avatar has the floor.

Pure: no I/O, no clock of its own (every fact arrives with its time). The session feeds
its public conversation events (``agent_speech_started``, ``agent_text``,
``agent_turn_ended``, ``agent_talking``, ``agent_interrupted``, ``caption``) to one
:class:`Floor` and to a :class:`ReplyMatch` per user turn in flight, and builds the
:class:`Reply` of ``speak()`` handles and ``ask()`` from them.

**Matching by the turn's own ids.** The server mints a ``transcript`` speechId for every
user turn it takes, its payload the turn's text (PROTOCOL.md §3.7:
``<nonce>-transcript-<text>``, the payload maybe cut short), and every event of the answer
carries that speechId or the agent turn id announced with it. A reply is the agent turn
whose speechId answers the text as it was sent (the same rule that confirms receipt,
:func:`~avatar_sdk.session.core.turns.speech_id_answers`), that was not seen before the turn was
sent (a late answer to an earlier turn with the same words carries another nonce, seen
before). A speech that starts with a speechId of no known form (a backend that sends none)
is taken as the reply too: nothing else could tell. Its spoken text is the ``agent_text``
segments whose ``spoken`` flag is set (what the avatar says out loud; not tool calls, tool
responses, thinking or UI payloads), joined.

**The floor.** A question sent while the avatar is still talking is a barge-in: the server
cuts the answer in flight. :class:`Floor` says whether an agent turn is still generating or
being said, so ``ask()`` sends only once it is over.
"""

from __future__ import annotations

import warnings
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from .turns import speech_id_answers

__all__ = [
    "AUDIO_GRACE",
    "TALK_START_GRACE",
    "Floor",
    "Onset",
    "Reply",
    "ReplyMatch",
]

#: After an agent turn with spoken text ended, how long the avatar may take to start
#: saying it (``agent_talking``) before the floor counts as free anyway (a backend that
#: reports no talking, a media-less session), seconds.
TALK_START_GRACE: Final = 1.0
#: After the avatar finished saying the reply, how long ``ask()`` still waits for its first audible
#: frame (the media path lags the control channel by a jitter buffer or so), seconds.
AUDIO_GRACE: Final = 1.0
#: With media, how long a reply waits for its voice or for the avatar to finish saying it,
#: before the :data:`AUDIO_GRACE` (seconds): a bound for a backend that never says so.
PLAYOUT_CAP: Final = 10.0


@dataclass(frozen=True, slots=True)
class Reply:
    """The avatar's reply to one user turn (``await session.ask(text)``,
    ``await handle.reply()``). Latencies are seconds on the session's clock from the moment
    the turn was written to the socket (``sent_at``), so they exclude any wait before it
    (the greeting, a reply still playing: ``waited``); None where not seen. Each is defined
    once, in :mod:`avatar_sdk.session.core.latency`, and carries the same name on the
    ``turn_latency`` event, the spans and metrics and the fleet report."""

    #: What the avatar said: its spoken segments, joined (tool calls and thinking left out).
    text: str
    #: The user turn as it was sent (cut to the protocol limit; several texts held during
    #: the greeting go out joined by newlines, as one turn with one answer).
    question: str
    #: The speechId the server minted for the turn, and the agent turn id(s) announced
    #: with it: the ids the reply was matched by.
    speech_id: str | None
    turn_ids: tuple[str, ...]
    #: When the turn was written (session clock, ``clock.monotonic()``), and how long the
    #: call waited before that (``ask()``: for the greeting or a reply still playing).
    sent_at: float
    waited: float
    #: Sent → first spoken text; → first audible avatar frame handed to the application
    #: (media sessions); → the avatar finished generating it (its ``agent_turn_ended``);
    #: → its voice finished playing: the last audible frame of it handed to the application
    #: (media sessions; plus a playout clock's delay when one is set). ``played_latency`` is
    #: known once the reply was played: ``ask(..., wait_for_playout=True)`` or
    #: ``handle.wait_for_playout()``.
    text_latency: float | None
    audio_latency: float | None
    generated_latency: float | None
    played_latency: float | None
    #: The reply was cut short before the avatar finished saying it, and by what if known:
    #: ``"speak"`` (another user turn), ``"interrupt"`` (``interrupt()``), ``"user_voice"``
    #: (the user started talking), ``"server"`` (``agent_interrupted`` with no cause seen
    #: here), ``"superseded"`` (another agent turn began).
    interrupted: bool
    interrupted_by: str | None
    #: The turn was resent after a recovery (``turn_resent``); the reply is the resent
    #: turn's.
    resent: bool

    @property
    def ended(self) -> bool:
        """The avatar finished generating the reply (its ``agent_turn_ended``)."""
        return self.generated_latency is not None

    @property
    def played(self) -> bool:
        """Its voice finished playing here (``played_latency`` is known)."""
        return self.played_latency is not None

    @property
    def end_latency(self) -> float | None:
        """Deprecated: ``generated_latency`` (the reply finished generating, not heard)."""
        warnings.warn(
            "Reply.end_latency is deprecated: it is Reply.generated_latency (the avatar "
            "finished generating the reply; played_latency is when it was heard)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.generated_latency


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


@dataclass(slots=True)
class Onset:
    """The first audible frame after a quiet one, once armed: a reply's voice begins after
    silence, while a frame audible right after arming may be the previous voice still
    playing (the media path lags the control channel)."""

    threshold: float
    at: float | None = None
    _primed: bool = False

    def feed(self, level: float, at: float) -> bool:
        """One frame's RMS level at ``at``; True when this frame is the onset."""
        if self.at is not None:
            return False
        if level <= self.threshold:
            self._primed = True
            return False
        if self._primed:
            self.at = at
            return True
        return False


@dataclass(slots=True)
class ReplyMatch:
    """The events of one user turn's reply (see the module docstring)."""

    #: Speech ids seen before the turn was registered: never this turn's reply.
    stale: Collection[str] = ()
    #: A spoken turn (its words unknown here): the first new agent turn after it answers.
    any_reply: bool = False
    question: str | None = None
    sent_at: float | None = None
    speech_id: str | None = None
    turn_ids: list[str] = field(default_factory=list)
    words: list[str] = field(default_factory=list)
    text_at: float | None = None
    audio_at: float | None = None
    ended_at: float | None = None
    talking_at: float | None = None
    #: The server's end of saying it (``agent_talking`` false, cut short, superseded, or
    #: nothing to say); ``played_at``: its voice finished playing here (set by the session).
    said_at: float | None = None
    played_at: float | None = None
    interrupted_by: str | None = None
    resent: bool = False
    #: A user action after the send that would cut the reply (speak, interrupt, voice).
    cause: str | None = None
    _also: set[str] = field(default_factory=set)
    _seen_after: set[str] = field(default_factory=set)
    _current: str | None = None
    _spoke: bool = False

    # -- the user turn ----------------------------------------------------------------------
    def sent(self, text: str, at: float) -> None:
        """The turn was written to the socket as ``text`` (possibly again: a held turn)."""
        self.question, self.sent_at = text, at

    def also_answers(self, text: str) -> None:
        """A speechId whose payload is ``text`` answers this turn too (a spiral resend)."""
        self._also.add(text)

    def restart(self, *, resent: bool = True) -> None:
        """The turn went out again (a resend after a recovery): a reply begun before it is
        not the reply; the resent turn's is."""
        if self.speech_id is not None:
            self.stale = {*self.stale, self.speech_id}
        self.speech_id, self.turn_ids, self.words = None, [], []
        self.text_at = self.audio_at = self.ended_at = None
        self.talking_at = self.said_at = self.played_at = None
        self.interrupted_by, self._spoke = None, False
        self.resent = self.resent or resent

    def note_user(self, cause: str) -> None:
        """The user acted after the send (``"speak"``, ``"interrupt"``, ``"user_voice"``):
        an interruption that follows is theirs."""
        if self.sent_at is not None and self.said_at is None:
            self.cause = cause

    # -- matching ---------------------------------------------------------------------------
    def _answers(self, speech_id: str | None) -> bool | None:
        """Whether a speech with this id answers the turn: True, False, or None when the id
        says nothing (absent, or of no known form)."""
        if self.question is None or (speech_id is not None and speech_id in self.stale):
            return False
        if self.any_reply:
            return None
        verdict = speech_id_answers(speech_id, self.question)
        if verdict is False and any(speech_id_answers(speech_id, t) for t in self._also):
            return True
        return verdict

    def _adopt(self, speech_id: str | None, turn_id: str | None) -> None:
        self.speech_id = speech_id
        if turn_id is not None and turn_id not in self.turn_ids:
            self.turn_ids.append(turn_id)

    def _ours(self, speech_id: str | None, turn_id: str | None) -> bool:
        if self.speech_id is None and not self.turn_ids:
            return False
        if speech_id is not None:
            return speech_id == self.speech_id
        return turn_id is not None and turn_id in self.turn_ids

    @property
    def adopted(self) -> bool:
        return self.speech_id is not None or bool(self.turn_ids)

    def feed(self, name: str, data: Mapping[str, Any], at: float) -> None:
        """One public event, with its time (``Event.at``)."""
        if self.sent_at is None:
            return  # not sent yet: nothing can answer it
        speech_id, turn_id = _str(data.get("speech_id")), _str(data.get("turn_id"))
        if name == "agent_speech_started":
            self._speech_started(speech_id, turn_id, data.get("is_new_turn") is not False, at)
        elif name == "agent_text":
            if not self.adopted and self._answers(speech_id):
                self._adopt(speech_id, turn_id)  # a backend that announces no speech
            ours = self._ours(speech_id, turn_id) and self.ended_at is None
            if ours and data.get("spoken") is True:
                self.words.append(str(data.get("content") or ""))
                self._spoke = True
                if self.text_at is None:
                    self.text_at = at
        elif name == "agent_turn_ended":
            if self._ours(speech_id, turn_id) and self.ended_at is None:
                self.ended_at = at
                if turn_id is not None and turn_id not in self.turn_ids:
                    self.turn_ids.append(turn_id)
        elif name == "agent_talking":
            if self.adopted and self._current == self.speech_id and self.said_at is None:
                if data.get("talking") is True:
                    self.talking_at = self.talking_at if self.talking_at is not None else at
                elif self.talking_at is not None or self.ended_at is not None:
                    self.said_at = at
        elif (
            name == "agent_interrupted"
            and self.adopted
            and self._current == self.speech_id
            and self.said_at is None
        ):
            self.interrupted_by = self.cause or "server"

    def _speech_started(
        self, speech_id: str | None, turn_id: str | None, new_turn: bool, at: float
    ) -> None:
        if not new_turn:
            if self._ours(speech_id, None) and turn_id is not None:
                self._adopt(self.speech_id, turn_id)  # a continuation of our turn
            return
        if self.adopted and speech_id != self.speech_id:
            if self.said_at is None:  # another agent turn took over before ours was said
                if self.interrupted_by is None and (
                    self.ended_at is None or self.talking_at is not None
                ):
                    self.interrupted_by = self.cause or "superseded"
                self.said_at = at
            self._current = speech_id
            return
        self._current = speech_id
        fresh = not self.adopted and speech_id not in self._seen_after
        if fresh and self._answers(speech_id) is not False:
            self._adopt(speech_id, turn_id)
        if speech_id is not None:
            self._seen_after.add(speech_id)

    def audio(self, at: float) -> None:
        """The first audible avatar frame after the send (an :class:`Onset`)."""
        if self.audio_at is None and self.sent_at is not None and at >= self.sent_at:
            self.audio_at = at

    def cut(self, cause: str, at: float) -> None:
        """Its saying ended with no event to say so (a renewal's swap retired the server
        session saying it): said from ``at``, interrupted by ``cause``."""
        if self.adopted and self.said_at is None:
            self.interrupted_by = self.interrupted_by or cause
            self.said_at = at

    def settle(self, at: float) -> None:
        """The reply ended with nothing (more) to say: it counts as said from ``at``
        (its turn ended with no spoken text, or the avatar never reported talking)."""
        if self.said_at is None and self.ended_at is not None:
            self.said_at = at

    def playout(self, at: float | None) -> None:
        """Its voice finished playing here at ``at`` (None: it was never heard; a reply with
        nothing to say is played when it was said)."""
        if self.played_at is None:
            self.played_at = at if at is not None or self._spoke else self.said_at

    # -- what it adds up to -----------------------------------------------------------------
    @property
    def ended(self) -> bool:
        return self.ended_at is not None

    @property
    def spoke(self) -> bool:
        """The reply carried spoken text."""
        return self._spoke

    @property
    def said(self) -> bool:
        """The server said the avatar finished saying it (or it had nothing to say)."""
        return self.said_at is not None

    @property
    def played(self) -> bool:
        return self.played_at is not None

    def snapshot(self, *, waited: float = 0.0) -> Reply:
        """The reply as known now."""
        sent = self.sent_at if self.sent_at is not None else 0.0

        def since(at: float | None) -> float | None:
            return None if at is None or self.sent_at is None else max(0.0, at - sent)

        return Reply(
            text="".join(self.words).strip(),
            question=self.question or "",
            speech_id=self.speech_id,
            turn_ids=tuple(self.turn_ids),
            sent_at=sent,
            waited=max(0.0, waited),
            text_latency=since(self.text_at),
            audio_latency=since(self.audio_at),
            generated_latency=since(self.ended_at),
            played_latency=since(self.played_at),
            interrupted=self.interrupted_by is not None,
            interrupted_by=self.interrupted_by,
            resent=self.resent,
        )


@dataclass(slots=True)
class Floor:
    """Whether an agent turn holds the floor: still generating, or still being said.

    Fed every public conversation event. An agent turn holds it from its
    ``agent_speech_started`` (a new turn) until its ``agent_turn_ended`` and, if it had
    spoken text, until ``agent_talking`` false (or ``agent_interrupted``); a turn with
    spoken text whose talking never began frees it :data:`TALK_START_GRACE` after its end.
    """

    speech_id: str | None = None
    generating: bool = False
    talking: bool = False
    spoke: bool = False
    ended_at: float | None = None
    talked: bool = False

    def feed(self, name: str, data: Mapping[str, Any], at: float) -> None:
        if name == "agent_speech_started":
            if data.get("is_new_turn") is not False:
                self.speech_id = _str(data.get("speech_id"))
                self.generating, self.spoke, self.ended_at, self.talked = True, False, None, False
        elif name == "agent_text":
            if data.get("spoken") is True and data.get("content"):
                self.spoke = True
        elif name == "caption":
            self.spoke = True
        elif name == "agent_turn_ended":
            sid = _str(data.get("speech_id"))
            if sid is None or self.speech_id is None or sid == self.speech_id:
                self.generating, self.ended_at = False, at
        elif name == "agent_talking":
            self.talking = data.get("talking") is True
            self.talked = self.talked or self.talking
        elif name == "agent_interrupted":
            self.talking = False
            self.talked = True
            self.generating = False

    def reset(self) -> None:
        """The session's agent turns are gone (it ended, or was rebuilt)."""
        self.generating = self.talking = self.spoke = self.talked = False
        self.ended_at = None

    def busy(self, now: float) -> bool:
        """Whether a question now would cut an agent turn short."""
        if self.generating or self.talking:
            return True
        if self.spoke and not self.talked and self.ended_at is not None:
            return now < self.ended_at + TALK_START_GRACE
        return False

    def recheck_in(self, now: float) -> float | None:
        """Seconds until :meth:`busy` may change with no event (the talking grace), or None
        (only an event changes it)."""
        if self.generating or self.talking or not self.busy(now) or self.ended_at is None:
            return None
        return max(0.0, self.ended_at + TALK_START_GRACE - now)
