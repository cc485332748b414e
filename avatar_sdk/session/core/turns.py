"""The turn ledger: user turns the server has not yet shown it received.

A turn written into a socket that is silently dead leaves the client without error: the
bytes sit in a kernel buffer that nobody reads. Socket.IO's connection-state recovery
replays the server's missed *outbound* events, never the client's, so after any recovery
the SDK itself must know which turns may be lost. This ledger keeps every sent turn until
the server shows evidence of receipt:

* an inbound event whose speechId was minted for it (trigger ``transcript``, payload the
  turn's text, PROTOCOL.md §3.7): the text must match exactly, or start with a payload of
  :data:`TRUNCATED_PAYLOAD` characters or more (cut short by the server); the newest turn
  wins, and each speechId confirms at most once (every segment of an answer carries it);
* ``agentTurnToTalk`` (the server handed a user turn to the brain): it confirms every
  turn sent on the current connection;

After a recovery, an unconfirmed turn with no evidence within ``turn_confirm_timeout`` is
resent exactly once; a confirmed turn is never resent.

Evidence for a turn confirms the turns sent before it only on the same connection (the
same *epoch*): a turn lost in a dead socket is never confirmed by the answer to a turn sent
after the recovery, even when that later text starts the same way. Pure: no I/O, no clock
of its own.

:class:`TurnGate` says when the server would drop a typed turn (during an uninterruptible
agent turn such as the opening greeting), so the desk holds it until the gate opens.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Final, Literal

from ...wire import (
    AgentInterrupted,
    AgentStartSpeech,
    AskPermissions,
    InboundEvent,
    SpeechId,
    StvFinishedGenerating,
    StvFinishedTalking,
    StvStartedTalking,
)

#: Turns remembered at most; the oldest unconfirmed one is forgotten first.
MAX_TRACKED_TURNS = 64
#: A speechId payload this long may be the turn's text cut short (the staging backend cuts
#: at 60; the service's limit is not documented): only then does a prefix count as a match.
TRUNCATED_PAYLOAD = 60
#: SpeechIds remembered as already used as evidence (each confirms at most once).
_SEEN_SPEECH_IDS = 256


def _normalize(text: str) -> str:
    return " ".join(text.split()).casefold()


def speech_id_answers(raw: str | None, text: str) -> bool | None:
    """Whether a speechId was minted for the user turn ``text`` (trigger ``transcript``,
    payload the text, or its start when cut short at :data:`TRUNCATED_PAYLOAD` characters
    or more). None when the id says nothing: absent, or of no known form."""
    if not raw:
        return None
    parsed = SpeechId.parse(raw)
    if parsed is None:
        return None
    if parsed.trigger != "transcript" or not parsed.payload:
        return False
    said, sent = _normalize(parsed.payload), _normalize(text)
    return sent == said or (len(parsed.payload) >= TRUNCATED_PAYLOAD and sent.startswith(said))


@dataclass(slots=True)
class Turn:
    """One user turn as sent."""

    seq: int
    text: str
    resent: bool = False
    confirmed: bool = False
    #: The connection it was written on (bumped at every recovery).
    epoch: int = 0


@dataclass(slots=True)
class TurnLedger:
    """Sent user turns until the server confirms them (see the module docstring)."""

    limit: int = MAX_TRACKED_TURNS
    _turns: list[Turn] = field(default_factory=list)
    _seq: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _epoch: int = 0
    _used: dict[str, None] = field(default_factory=dict)

    def sent(self, text: str, *, resent: bool = False) -> Turn:
        """Record a turn that was just written to the socket."""
        turn = Turn(next(self._seq), text, resent=resent, epoch=self._epoch)
        self._turns.append(turn)
        if len(self._turns) > self.limit:
            del self._turns[: len(self._turns) - self.limit]
        return turn

    @property
    def last_seq(self) -> int:
        """The sequence number of the newest turn sent (0 before any)."""
        return self._turns[-1].seq if self._turns else 0

    def new_epoch(self) -> int:
        """A recovery: turns from now on travel on another connection. Returns the cut-off
        (the newest turn sent before it)."""
        self._epoch += 1
        return self.last_seq

    def unconfirmed(self) -> list[Turn]:
        return [t for t in self._turns if not t.confirmed]

    def observe_speech_id(self, raw: str | None) -> bool:
        """A server event carried ``raw`` as its speechId; True if it confirmed a turn."""
        # Hot path (every brain segment carries a speechId): nothing to confirm, no parse.
        if not raw or not self._turns or raw in self._used:
            return False
        parsed = SpeechId.parse(raw)
        if parsed is None or parsed.trigger != "transcript" or not parsed.payload:
            return False
        said = _normalize(parsed.payload)
        cut_short = len(parsed.payload) >= TRUNCATED_PAYLOAD
        newest_first = [t for t in reversed(self._turns) if not t.confirmed]
        match = next((t for t in newest_first if _normalize(t.text) == said), None)
        if match is None and cut_short:
            match = next((t for t in newest_first if _normalize(t.text).startswith(said)), None)
        if match is None:
            return False
        self._used[raw] = None
        if len(self._used) > _SEEN_SPEECH_IDS:
            del self._used[next(iter(self._used))]
        self.confirm_through(match)
        return True

    def confirm_through(self, turn: Turn) -> None:
        """``turn`` and every turn written before it on the same connection reached the
        server (one ordered socket: it read them first)."""
        for other in self._turns:
            if other.epoch == turn.epoch and other.seq <= turn.seq:
                other.confirmed = True
        self._turns = [t for t in self._turns if not t.confirmed]

    def confirm_current(self) -> None:
        """Every turn written on the current connection reached the server."""
        for turn in self._turns:
            if turn.epoch == self._epoch:
                turn.confirmed = True
        self._turns = [t for t in self._turns if not t.confirmed]

    def take_resends(self, through: int) -> list[Turn]:
        """Unconfirmed turns up to ``through`` that may be resent (once each); they leave
        the ledger, and their resend is recorded as a new turn by the caller."""
        due = [t for t in self._turns if t.seq <= through and not t.confirmed and not t.resent]
        self._turns = [t for t in self._turns if t not in due]
        return due

    def forget(self, turn: Turn) -> None:
        """A turn that was never written after all (the send failed)."""
        self._turns = [t for t in self._turns if t is not turn]

    def clear(self) -> None:
        self._turns.clear()


#: speechId triggers of agent turns a user turn cannot interrupt: the service ignores the
#: barge-in marker during one and drops a typed turn sent then (PROTOCOL.md §4.13 [newer]).
UNINTERRUPTIBLE_TRIGGERS: Final = frozenset(
    {"approved-permissions", "resume-replay", "wake-up", "hangup-message"}
)


@dataclass(slots=True)
class TurnGate:
    """Whether the server would take a typed turn now. Pure: fed what the server said.

    ``open``: it would. ``expected``: the session was just approved, so the opening greeting
    (uninterruptible) is due but has not begun. ``running``: an uninterruptible turn is on
    until its closing events (``stvFinishedTalking`` or ``agentInterrupted``; for a turn
    that never talked, ``stvFinishedGenerating``). A turn typed while the gate is not open
    would be dropped by the server, so the client holds it until the gate opens.
    """

    phase: Literal["open", "expected", "running"] = "open"
    speech_id: str | None = None
    talking: bool = False

    def expect_opening(self) -> None:
        """``askPermissions``: the approval that starts the opening greeting comes next."""
        self.phase, self.speech_id, self.talking = "expected", None, False

    def speech_started(self, speech_id: str | None, is_new_turn: bool) -> bool:
        """``agent_start_speech``; True if the gate opened (a new, interruptible turn)."""
        if not is_new_turn:
            return False  # a continuation of the turn in flight
        parsed = SpeechId.parse(speech_id) if speech_id else None
        if parsed is not None and parsed.trigger in UNINTERRUPTIBLE_TRIGGERS:
            self.phase, self.speech_id, self.talking = "running", speech_id, False
            return False
        return self.reset()

    def talking_started(self) -> None:
        if self.phase == "running":
            self.talking = True

    def talking_finished(self) -> bool:
        """``stvFinishedTalking`` / ``agentInterrupted``; True if the gate opened."""
        return self.reset() if self.phase == "running" else False

    def generation_finished(self, speech_id: str | None) -> bool:
        """``stvFinishedGenerating``: ends an uninterruptible turn that never talked."""
        if self.phase == "running" and not self.talking and speech_id == self.speech_id:
            return self.reset()
        return False

    def feed(self, event: InboundEvent) -> bool | None:
        """One inbound event; True if the gate just opened, None if the event says
        nothing about it."""
        if isinstance(event, AskPermissions):
            self.expect_opening()
            return False
        if isinstance(event, AgentStartSpeech):
            return self.speech_started(event.speech_id, event.is_new_turn)
        if isinstance(event, StvStartedTalking):
            self.talking_started()
            return False
        if isinstance(event, StvFinishedTalking | AgentInterrupted):
            return self.talking_finished()
        if isinstance(event, StvFinishedGenerating):
            return self.generation_finished(event.speech_id)
        return None

    def give_up_waiting(self) -> bool:
        """The expected opening never began: stop waiting for it; True if the gate opened."""
        return self.reset() if self.phase == "expected" else False

    def reset(self) -> bool:
        """Open (the session ended, or the turn is over); True if it was not open."""
        was_closed = self.phase != "open"
        self.phase, self.speech_id, self.talking = "open", None, False
        return was_closed
