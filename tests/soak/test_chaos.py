"""Soak: a seeded random tour of faults on one audio+video session (``make soak``).

The seed is printed so a failure can be replayed: ``AVATAR_SOAK_SEED=<n> make soak``
(``AVATAR_SOAK_ROUNDS`` sets the number of rounds, 40 by default). On a failure the tour's
timeline (faults, recoveries, resends, answers) is printed before the assertion.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import pytest

from avatar_sdk import AvatarSession, RetryPolicy, SessionConfig
from avatar_sdk.events.bus import Event
from avatar_sdk.media import ToneSource
from avatar_sdk.testing import Conversation, StagingServer
from avatar_sdk.testing.leaks import describe_task
from avatar_sdk.wire import SpeechId

from ..integration.conftest import sdk_tasks, until
from ..integration.test_media_session import open_peers

pytestmark = pytest.mark.slow

FAULTS = (
    "drop",  # transport killed, recoverable: socket tier
    "refuse",  # transport killed, recovery refused: cold tier
    "stv",  # ICE failure of the downlink: media tier
    "asr",  # ICE failure of the uplink: media tier
    "stall",  # the avatar's RTP stops for a while
    "silent_in_place",  # silently dead socket the server times out: socket tier
    "silent_cold",  # silently dead socket the server never notices: cold tier
    "pause_resume",  # pause, maybe a socket fault while paused, resume
    "renew",  # a renewal of the server session on the same thread, the turn spoken during it
)
#: What may hit the control socket while the conversation is paused.
PAUSED_FAULTS = ("none", "drop", "silent_in_place", "silent_cold")
#: The tier each control-socket fault must recover through.
TIER = {"drop": "socket", "refuse": "cold", "silent_in_place": "socket", "silent_cold": "cold"}
#: After this the staging server times a silenced socket out itself (recoverable), well
#: before the client's probe notices, so the client recovers it in place.
SILENT_SERVER_TIMEOUT = 0.3
#: A silently dead socket is noticed in ~0.6-1.2 s (a probe after 0.5 s of quiet, answered
#: within 0.6 s); a turn sent before a recovery is resent after 1 s without evidence.
#: ``stable_after=0``: the tour forces a cold rebuild every few seconds by design, which by
#: the streak rule is a flapping server (rebuilds that do not stay up ``stable_after`` count
#: against the budget, ``docs/resilience.md``); this tour audits turns across the tiers, so
#: every rebuilt link counts as stable here (the budget has its own tests).
CONFIG = SessionConfig(
    media_recovery_timeout=5.0,
    reconnect_window=5.0,
    socket_probe_interval=0.5,
    socket_probe_timeout=0.6,
    turn_confirm_timeout=1.0,
    cold_reconnect=RetryPolicy(stable_after=0.0),
)
#: Bound of one recovery, and of one turn from speak() to the end of its answer (a cold
#: rebuild with media, then the confirm timeout, then the answer).
RECOVERY = 20.0
ANSWER = 30.0
#: ``AVATAR_SOAK_SKIP_KNOWN=1`` steps around the windows of a known SDK defect (a client emit
#: swallowed by a dying socket is never re-applied by an in-place recovery; reproduced in
#: ``tests/integration/test_lost_client_emits.py``): the tour lets the server read
#: ``approvedPermissions`` (the greeting ends) before its first fault, and the pause before a
#: fault while paused. Off by default: ``make soak`` holds the SDK to the whole contract.
SKIP_KNOWN = os.environ.get("AVATAR_SOAK_SKIP_KNOWN") == "1"


def _spoken_payload(speech_id: object) -> str | None:
    """The user text a ``transcript`` speechId answers (None for any other speech)."""
    parsed = SpeechId.parse(speech_id) if isinstance(speech_id, str) else None
    if parsed is None or parsed.trigger != "transcript":
        return None
    return parsed.payload


@dataclass
class Tour:
    """One seeded tour: the session, the server, and what happened, for the final audit."""

    seed: int
    staging: StagingServer
    session: AvatarSession
    rng: random.Random
    texts: list[str] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    timeline: list[str] = field(default_factory=list)
    answers: Counter[str] = field(default_factory=Counter)
    resends: defaultdict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    started: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.session.on("*", self._record)

    def note(self, line: str) -> None:
        self.timeline.append(f"{time.monotonic() - self.started:8.3f} {line}")

    def _record(self, event: Event) -> None:
        data = event.data
        if event.name == "agent_speech_started":
            text = _spoken_payload(data.get("speech_id"))
            if text is not None:
                self.answers[text] += 1
        elif event.name == "turn_resent":
            self.resends[data["text"]].append(data["tier"])
        elif event.name not in (
            "state_changed",
            "reconnecting",
            "reconnected",
            "gave_up",
            "error",
            "session_released",
            "media_recovering",
            "media_recovered",
            "ended",
        ):
            return
        self.note(f"{event.name} {data}")

    # -- faults -----------------------------------------------------------------------------
    async def inject(self, fault: str) -> None:
        faults = self.staging.faults
        self.note(f"-- fault {fault}")
        if fault in ("drop", "refuse"):
            await faults.drop_socket(recovery=fault == "drop")
        elif fault in ("stv", "asr"):
            await faults.ice_failure(fault)
        elif fault == "stall":
            await faults.media_stall("stv", seconds=self.rng.uniform(0.5, 3.0))
        elif fault == "silent_in_place":
            faults.silent_socket(server_timeout=SILENT_SERVER_TIMEOUT)
        elif fault == "silent_cold":
            faults.silent_socket(server_timeout=None)
        else:
            raise AssertionError(f"unknown fault {fault}")

    def expect_recovery(self) -> asyncio.Future[Event]:
        """The next recovery of the control socket (the socket or the cold tier)."""
        waiter = self.session.expect(
            "reconnected",
            predicate=lambda e: e.data["tier"] in ("socket", "cold"),
            timeout=RECOVERY,
        )
        return asyncio.ensure_future(waiter.wait())

    async def recovered(self, waiter: asyncio.Future[Event], fault: str, where: str) -> None:
        event = await waiter
        assert event.data["tier"] == TIER[fault], (where, fault, event.data)
        if fault.startswith("silent"):
            # The vanished peer's connection finally goes away (the server's heartbeat would
            # close it after 45 s): without this every silent_cold leaves a live server
            # session, media peers included, for the rest of the tour. Nothing it holds is
            # ever read: the bytes a client wrote into it are dropped with it.
            self.staging.sio.release_blackholes()

    def server_summary(self) -> list[str]:
        """The staging server's side, for a failure report."""
        lines = [
            f"server session {sid[:8]}: approved={c.approved} paused={c.paused} "
            f"muted={c.muted} turns={c.user_turns} dropped={c.dropped_turns}"
            for sid, c in self.staging.conversations.items()
        ]
        quiet = ("asr-webrtc-offer", "asr-webrtc-ice-candidate", "checkAvailability")
        received = [e for e in self.staging.received if e.event not in quiet]
        for event in received[-30:]:
            lines.append(f"  received {event.sid[:8]} {event.event} {event.payload}")
        return lines

    def live_conversation(self) -> Conversation:
        """The server session the client is on now: the newest (a cold reconnect opens a
        new one; an in-place recovery keeps its own)."""
        return list(self.staging.conversations.values())[-1]

    # -- rounds -----------------------------------------------------------------------------
    async def round(self, index: int) -> None:
        fault = self.rng.choice(FAULTS)
        text = f"turn {index:03d} ({fault})"  # unique, and no text is a prefix of another
        where = f"seed {self.seed} round {index}"
        self.faults.append(fault)
        if fault == "pause_resume":
            await self.pause_resume(where)
            await self.turn(text, where)
            return
        if fault == "renew":
            await self.renew_during(text, where)
            return
        recovery = self.expect_recovery() if fault in TIER else None
        await self.inject(fault)
        into_dead_socket = fault.startswith("silent") and self.rng.random() < 0.5
        if not into_dead_socket:
            # Silent: often before the probe notices, sometimes while it recovers, or after.
            spread = 1.5 if fault.startswith("silent") else 0.3
            await asyncio.sleep(self.rng.uniform(0.0, spread))
        resent = self.session.expect(
            "turn_resent", predicate=lambda e: e.data["text"] == text, timeout=ANSWER
        )
        try:
            await self.turn(text, where, recovery=(recovery, fault))
            if into_dead_socket:
                # Written into a socket the server no longer reads, before the client knew:
                # lost there, so resent once after the recovery, by the recovery's tier.
                event = await resent
                assert event.data["tier"] == TIER[fault], (where, event.data)
        finally:
            resent.cancel()

    async def turn(
        self,
        text: str,
        where: str,
        recovery: tuple[asyncio.Future[Event] | None, str] = (None, ""),
    ) -> None:
        """Speak ``text`` and wait until its answer ended (and the fault's recovery, if any)."""
        session = self.session
        self.texts.append(text)
        answered = session.expect(
            "agent_turn_ended",
            predicate=lambda e: _spoken_payload(e.data.get("speech_id")) == text,
            timeout=ANSWER,
        )
        self.note(f"-- speak {text!r} in {session.state}")
        await asyncio.wait_for(session.speak(text), ANSWER)
        waiter, fault = recovery
        if waiter is not None:
            await self.recovered(waiter, fault, where)
        await answered
        assert session.state in ("connected", "recovering_media"), (where, session.state)

    async def pause_resume(self, where: str) -> None:
        """Pause; maybe lose the control socket while paused (the recovery must come back
        to ``paused``, with the server session paused too); resume."""
        session = self.session
        paused = session.expect(
            "state_changed", predicate=lambda e: e.data["state"] == "paused", timeout=RECOVERY
        )
        self.note(f"-- pause in {session.state}")
        await session.pause()
        if session.state == "recovering_media":
            # Paused while one channel recovers: the machine enters ``paused`` once the
            # media tier is done (``media_recovered``, or ``cold_reconnected`` if it went cold).
            await paused
        paused.cancel()
        assert session.state == "paused", (where, session.state)
        fault = self.rng.choice(PAUSED_FAULTS)
        self.faults[-1] += f"+{fault}"
        if SKIP_KNOWN:
            await self.server_read_so_far()
        if fault != "none":
            await asyncio.sleep(self.rng.choice((0.0, self.rng.uniform(0.0, 0.3))))
            recovery = self.expect_recovery()
            await self.inject(fault)
            await self.recovered(recovery, fault, where)
            assert session.state == "paused", (where, fault, session.state)
        else:
            await asyncio.sleep(self.rng.uniform(0.0, 0.3))
        await self.server_read_so_far()  # the pause, or its re-sending after a recovery
        assert self.live_conversation().paused, (where, fault, "the server session is not paused")
        self.note("-- resume")
        await session.resume()
        assert session.state == "connected", (where, session.state)

    async def renew_during(self, text: str, where: str) -> None:
        """A renewal (make-before-break) with the round's turn spoken while it prepares:
        the turn is answered once, on whichever server session was current; the thread is
        kept and the session stays connected (``docs/lifecycle.md``)."""
        session = self.session
        if session.state != "connected":
            self.note(f"-- renew skipped in {session.state}")
            await self.turn(text, where)
            return
        thread = session.thread_id
        renewed = session.expect("session_renewed", timeout=RECOVERY)
        self.note("-- renew")
        renewal = asyncio.ensure_future(session.renew())
        try:
            await asyncio.sleep(self.rng.uniform(0.0, 1.0))
            await self.turn(text, where)
            await asyncio.wait_for(renewal, RECOVERY)
        finally:
            renewal.cancel()
        event = await renewed
        self.note(f"session_renewed {event.data}")
        assert event.data["thread_id"] == thread, (where, event.data)
        assert session.thread_id == thread, where

    async def server_read_so_far(self) -> None:
        """Until the server answers a probe sent now: on one ordered socket, it has read
        everything the client sent before."""
        read = self.session.expect("capacity_changed", timeout=RECOVERY)
        self.session.notify_network_change(media=False)  # the watchdog probes at its next tick
        await read

    # -- the audit --------------------------------------------------------------------------
    def audit(self) -> None:
        """Every turn reached the server exactly once and was answered exactly once."""
        received: defaultdict[str, list[str]] = defaultdict(list)
        for event in self.staging.received_events("onTextEntered"):
            payload = event.payload if isinstance(event.payload, dict) else {}
            if payload.get("isFinal") is True and isinstance(payload.get("text"), str):
                received[payload["text"]].append(event.sid)
        assert sorted(received) == sorted(self.texts), "the server got a turn nobody spoke"
        assert sorted(self.answers) == sorted(self.texts), "an answer to a turn nobody spoke"
        for text in self.texts:
            sids, tiers = received[text], self.resends[text]
            assert self.answers[text] == 1, (self.seed, text, "answers", self.answers[text])
            assert len(tiers) <= 1, (self.seed, text, "resent more than once", tiers)
            assert len(set(sids)) == len(sids), (self.seed, text, "twice to one server session")
            # Once, except a turn an old server session read whose answer never came back
            # before a cold reconnect replaced that session: resent on the new one.
            most = 2 if tiers == ["cold"] else 1
            assert 1 <= len(sids) <= most, (self.seed, text, "received by", sids, tiers)


async def test_seeded_chaos_tour_keeps_the_session_usable() -> None:
    """Faults at random between user turns, each turn answered before the next fault.

    Turn accounting is strict. Each turn's text is unique; at the end, from the user's point
    of view every turn was answered exactly once (one ``agent_speech_started`` whose
    speechId carries its text, and its ``agent_turn_ended`` within ``ANSWER``), and the
    staging server received every text exactly once as a final ``onTextEntered``, however
    it got there:

    * spoken into a silently dead socket before the client noticed (the ``silent_*`` faults
      do that half the time): that copy is never read, the turn is resent once
      (``turn_resent`` with the recovery's tier) and the server sees the resend only;
    * spoken while a recovery runs: held, then sent once on the recovered or new session;
    * confirmed by the server (its speechId came back): never resent.

    Legitimate exceptions: a turn an old server session read but whose answer the client
    never saw before a cold reconnect replaced that session is resent on the new one, so
    the server (two sessions) received it twice, never twice on one session, and the user
    still sees one answer (a replaced link's late events are ignored). A spiral resend
    carries ``SPIRAL_RECOVERY_PREFIX`` and would count as another text; this tour scripts
    no tool spiral, so any such text fails the audit.

    A pause survives recoveries: after a socket fault while paused the session is
    ``paused`` again and the live server session is paused; ``resume()`` then works.
    At the end ``session_completed`` went out once, and no task nor peer is left open.
    """
    seed = int(os.environ.get("AVATAR_SOAK_SEED", random.randrange(1 << 30)))
    print(f"chaos seed: {seed}")
    rounds = int(os.environ.get("AVATAR_SOAK_ROUNDS", "40"))
    async with StagingServer() as staging:
        session = AvatarSession(
            staging.url,
            staging.token,
            genie_url=staging.genie_url,
            audio=ToneSource(),
            allow_insecure_transport=True,
            config=CONFIG,
        )
        tour = Tour(seed, staging, session, random.Random(seed))
        try:
            greeted = session.expect("agent_turn_ended", timeout=ANSWER)
            await session.connect()
            if SKIP_KNOWN:
                print("AVATAR_SOAK_SKIP_KNOWN=1: known lost-emit windows avoided")
                await greeted
            else:
                greeted.cancel()
            for index in range(rounds):
                await tour.round(index)
            tour.audit()
            print(f"faults: {' '.join(tour.faults)}")
            resent = {text: tiers for text, tiers in tour.resends.items() if tiers}
            print(f"resent: {resent}; reconnects: {session.stats()['reconnects']}")
            thread = session.thread_id
            await session.close()
            assert staging.completed_threads == [thread]
        except BaseException:
            print("\n".join(tour.timeline + tour.server_summary()))
            raise
        finally:
            await session.close()
    # Bounded wait for the last peers' teardown, not a fixed sleep.
    assert await until(lambda: sdk_tasks() == [], 2), [describe_task(t) for t in sdk_tasks()]
    assert open_peers() == []
