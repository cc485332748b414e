"""``avatar-sdk demo``: the fault tour. The embedded staging backend, one live session (audio
and video unless ``--no-media``), and a fault per recovery tier, shown as a live timeline
(state, each recovery with its tier and measured duration, the avatar's words) that ends
with a summary table."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..config import SessionConfig
from ..errors import AvatarError
from ..events.bus import Event
from ..media import ToneSource
from ..session.facade import AvatarSession
from ..testing import StagingServer
from . import exits, interrupts
from .output import ConversationPrinter, Screen, seconds

#: How long one fault's recovery may take before the demo calls it failed (seconds).
RECOVERY_BOUND = 15.0
REPLY_BOUND = 10.0


@dataclass(frozen=True)
class Fault:
    """One stop of the tour: what is injected, and the event that proves the recovery."""

    name: str
    label: str
    inject: Callable[[StagingServer], Awaitable[Any]]
    event: str
    match: dict[str, str]
    media: bool = False
    #: The recovery is a new server session, whose agent greets again (a greeting the
    #: server does not let a turn interrupt): the tour waits for it before going on.
    greets: bool = False


TOUR: tuple[Fault, ...] = (
    Fault(
        "socket",
        "a recoverable transport drop",
        lambda s: s.faults.drop_socket(),
        "reconnected",
        {"tier": "socket"},
    ),
    Fault(
        "cold",
        "a drop the server refuses to recover",
        lambda s: s.faults.drop_socket(recovery=False),
        "reconnected",
        {"tier": "cold"},
        greets=True,
    ),
    Fault(
        "stv",
        "a downlink ICE failure",
        lambda s: s.faults.ice_failure("stv"),
        "media_recovered",
        {"channel": "stv"},
        media=True,
    ),
    Fault(
        "asr",
        "an uplink ICE failure",
        lambda s: s.faults.ice_failure("asr"),
        "media_recovered",
        {"channel": "asr"},
        media=True,
    ),
)
NAMES: tuple[str, ...] = tuple(f.name for f in TOUR)


def select(names: str | None, media: bool) -> list[Fault]:
    """The faults named in ``names`` (comma-separated; None: the whole tour, ``none``: no
    fault), in tour order. ``ValueError`` names an unknown or media-only fault."""
    if names is None:
        return [f for f in TOUR if media or not f.media]
    wanted = {n.strip() for n in names.split(",") if n.strip()} - {"none"}
    unknown = wanted - set(NAMES)
    if unknown:
        raise ValueError(
            f"unknown fault(s): {', '.join(sorted(unknown))} (known: {', '.join(NAMES)})"
        )
    if not media:
        needs = sorted(f.name for f in TOUR if f.name in wanted and f.media)
        if needs:
            raise ValueError(f"{', '.join(needs)} need media: drop --no-media")
    return [f for f in TOUR if f.name in wanted]


@dataclass
class Outcome:
    fault: Fault
    event: Event | None
    error: str | None = None


class Demo:
    """One run of the tour."""

    def __init__(self, faults: list[Fault], media: bool, screen: Screen | None = None) -> None:
        self.faults = faults
        self.media = media
        self.screen = screen or Screen()
        self.start = time.monotonic()
        self.outcomes: list[Outcome] = []
        self.ended: dict[str, Any] | None = None
        self.uplink_frames = 0
        self.printer = ConversationPrinter(self.screen, self.start, stamps=True, states=True)

    def step(self, text: str) -> None:
        self.printer.status(f"-- {text} --", "bold yellow", time.monotonic())

    async def run(self) -> int:
        async with StagingServer() as staging:
            self.screen.line(f"staging backend on {staging.url}", "dim")
            session = AvatarSession(
                staging.url,
                staging.token,
                genie_url=staging.genie_url,
                audio=ToneSource(frequency=300.0) if self.media else None,
                media=self.media,
                allow_insecure_transport=True,
                config=SessionConfig(reconnect_window=5.0),
            )
            self.printer.thread_of = lambda: session.thread_id
            session.on("*", self.printer.on_event)
            session.on("ended", lambda e: setattr(self, "ended", dict(e.data)))
            try:
                code = await self._tour(staging, session)
            except AvatarError as error:
                self.screen.line(f"demo failed: {error}", "red")
                code = exits.for_error(error)
            finally:
                await session.close()
            self._summary(staging, session)
            return code

    async def _say(self, session: AvatarSession, text: str) -> None:
        answered = session.expect("agent_turn_ended", timeout=REPLY_BOUND)
        self.printer.user(text, time.monotonic())
        await session.speak(text)
        await answered

    async def _tour(self, staging: StagingServer, session: AvatarSession) -> int:
        greeting = session.expect("agent_turn_ended", timeout=REPLY_BOUND + 30)
        await session.connect()
        await greeting
        await self._say(session, "What can you do?")
        for fault in self.faults:
            self.step(f"injecting {fault.label}")
            waiter = session.expect(
                fault.event,
                predicate=lambda e, f=fault: all(e.data.get(k) == v for k, v in f.match.items()),  # type: ignore[misc]
                timeout=RECOVERY_BOUND,
            )
            greeting = session.expect("agent_turn_ended", timeout=RECOVERY_BOUND + REPLY_BOUND)
            await fault.inject(staging)
            try:
                self.outcomes.append(Outcome(fault, await waiter))
                if fault.greets:
                    await greeting
                else:
                    greeting.cancel()
            except (TimeoutError, AvatarError) as error:
                self.outcomes.append(Outcome(fault, None, str(error)))
                return exits.for_ending(self.ended) if self.ended else exits.GAVE_UP
        await self._say(session, "And after all that?")
        if self.media and staging.live_sids:
            # Media flows on the rebuilt session both ways: a second of it, then counted.
            await asyncio.sleep(1.0)
            self.uplink_frames = staging.media.asr_stats(staging.live_sids[0]).frames
        return exits.OK

    def _summary(self, staging: StagingServer, session: AvatarSession) -> None:
        rows = []
        for outcome in self.outcomes:
            data = outcome.event.data if outcome.event is not None else {}
            how = data.get("method") or (
                "in place" if data.get("recovered") else "new server session"
            )
            tier = data.get("tier") or ("media" if outcome.fault.media else "?")
            rows.append(
                [
                    outcome.fault.name,
                    outcome.fault.label,
                    str(tier) if outcome.event is not None else "-",
                    str(how) if outcome.event is not None else "-",
                    seconds(data.get("duration")) if outcome.event is not None else "-",
                    "recovered" if outcome.event is not None else f"FAILED: {outcome.error}",
                ]
            )
        self.screen.line()
        columns = ["fault", "what", "tier", "how", "recovery", "result"]
        self.screen.table("recoveries", columns, rows)
        stats = session.stats()
        reconnects = ", ".join(f"{k}={v}" for k, v in stats["reconnects"].items())
        facts = [
            ["final state", str(session.state)],
            ["thread", str(session.thread_id)],
            ["joins", str(len(staging.received_events("join")))],
            ["reconnects", reconnects],
            ["turns answered", str(len(self.printer.turns))],
        ]
        if self.media:
            video, audio = session.avatar_video, session.avatar_audio
            received = f"video frames={video.received if video else 0}"
            received += f", audio frames={audio.received if audio else 0}"
            media = staging.media
            facts += [
                ["avatar media received", received],
                ["uplink frames at the backend", f"{self.uplink_frames} (last server session)"],
                ["WHEP", f"subscribes={media.whep_posts} deletes={media.whep_deletes}"],
            ]
        self.screen.line()
        self.screen.table("session", ["fact", "value"], facts)


def demo(faults: list[Fault], media: bool) -> int:
    """Run the tour to its exit code (0: every recovery happened)."""
    try:
        return interrupts.run(Demo(faults, media).run())
    except KeyboardInterrupt:
        print("avatar-sdk: interrupted", file=sys.stderr)
        return exits.INTERRUPTED
