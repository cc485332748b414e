"""One time line (issue 16, item 3): the transport stamps its facts on the session's clock.

The media watchdog compares what the lanes stamped (a downlink's last frame, a receiver
report's arrival) with its own readings of the session clock, and the connect deadline is
clipped on that clock too. Here the lanes' liveness logic runs under a FakeClock with fakes
of the aiortc objects (a received track fed by the test, no peer, no network): time moves
only when the test advances it, so the verdicts are exact. The same rule against a real
peer is ``test_a_media_stall_and_its_recovery_run_on_the_session_clock`` in
``tests/integration/test_media_recovery.py``.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Coroutine
from typing import Any

import pytest
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from avatar_sdk import AvatarSession, ErrorCode, SessionConfig
from avatar_sdk.clock import SYSTEM_CLOCK, FakeClock
from avatar_sdk.events.bus import EventBus
from avatar_sdk.session.core.machine import SessionMachine
from avatar_sdk.session.core.stats import SessionStats
from avatar_sdk.session.handshake import Deadline
from avatar_sdk.session.link import ServerLink
from avatar_sdk.session.link_slot import LinkSlot
from avatar_sdk.session.media_recovery import MEDIA_TICK, MediaTier
from avatar_sdk.session.supervisor import Supervisor
from avatar_sdk.transport.rtc import media as media_module
from avatar_sdk.transport.rtc.asr import UplinkTrack
from avatar_sdk.transport.rtc.media import MediaLanes
from avatar_sdk.transport.rtc.stv import FanoutTrack

STALL = 2.0


class _ReceivedTrack(MediaStreamTrack):
    """What aiortc hands the downlink on ``track``: here, frames the test pushes."""

    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self.frames: asyncio.Queue[object | None] = asyncio.Queue()

    async def recv(self) -> Any:
        frame = await self.frames.get()
        if frame is None:
            raise MediaStreamError
        return frame


def _lanes(clock: FakeClock, voice: FanoutTrack | None = None) -> MediaLanes:
    return MediaLanes(
        config=SessionConfig(media_stall_timeout=STALL),
        uplink_track=UplinkTrack(None),
        outputs={"audio": voice or FanoutTrack("audio")},
        video=False,
        allow_private=True,
        clock=clock,
    )


def _connected_machine() -> SessionMachine:
    machine = SessionMachine(strict=True)
    for trigger in ("start", "socket_open", "joined", "stv_ready", "agent_shown", "media_skipped"):
        machine.fire(trigger)
    machine.fire("approved")
    return machine


class _RecordingSupervisor(Supervisor):
    """A supervisor whose tasks are only recorded (the link's scope spawns through it)."""

    def __init__(self, spawned: _Spawned) -> None:
        super().__init__(lambda name, exc: None)
        self._record = spawned
        self.standins: list[asyncio.Task[Any]] = []

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        self._record(coro, name)
        # Stands for the recovery while it would run: the channel stays taken.
        task: asyncio.Task[Any] = asyncio.ensure_future(asyncio.Event().wait())
        self.standins.append(task)
        return task


class _Spawned:
    """The media tier's spawn: records what it would start (a recovery is not run here)."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.started = asyncio.Event()

    def __call__(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        self.names.append(name)
        coro.close()
        self.started.set()
        task: asyncio.Task[Any] = asyncio.ensure_future(asyncio.sleep(0))
        return task


async def _asleep(clock: FakeClock) -> None:
    """Until the watchdog is asleep on the clock again (its one timer is due)."""
    for _ in range(200):
        if clock.sleepers:
            return
        await asyncio.sleep(0)
    raise AssertionError("the watchdog did not go back to sleep")


@pytest.mark.parametrize("offset", [-3600.0, 3600.0], ids=["fake-behind-real", "fake-ahead"])
async def test_the_media_watchdog_judges_a_downlink_stall_on_the_session_clock(
    offset: float,
) -> None:
    """Frames stamped by the downlink and the watchdog's own times are on one line: media
    that flows (in fake time) is never judged dead, and a stall is judged one stall window
    after the last frame, however far the fake clock is from the real one (an hour ahead
    or behind: real-time stamps would be judged dead at once, or never)."""
    clock = FakeClock(start=SYSTEM_CLOCK.monotonic() + offset)
    voice = FanoutTrack("audio")
    lanes = _lanes(clock, voice)
    downlink = lanes._new_downlink()  # the lanes hand their clock down
    lanes.stv = downlink
    track = _ReceivedTrack()
    downlink._on_track(track)
    machine = _connected_machine()
    spawned = _Spawned()
    supervisor = _RecordingSupervisor(spawned)
    slot = LinkSlot(supervisor)
    slot.install(ServerLink(channel=None, config=SessionConfig(), lanes=lanes))  # type: ignore[arg-type]

    async def never(_: Any) -> Any:
        raise AssertionError("no escalation, no socket check in this test")

    tier = MediaTier(
        machine=machine,
        config=SessionConfig(media_stall_timeout=STALL),
        clock=clock,
        slot=slot,
        emit=lambda name, data: None,
        escalate=never,
        socket_alive=never,
        stats=SessionStats(),
    )
    pushed: list[float] = []

    async def run_for(seconds: float, frame_every: int | None = None) -> None:
        for tick in range(round(seconds / MEDIA_TICK)):
            if frame_every is not None and tick % frame_every == 0:
                pushed.append(clock.monotonic())
                await track.frames.put(object())
                await asyncio.wait_for(voice.recv(), 1.0)  # through the downlink's pump
            await _asleep(clock)
            await clock.advance(MEDIA_TICK)

    watchdog = asyncio.ensure_future(tier.watchdog())
    try:
        # Four stall windows of fake time with a frame every 1.5 s: alive throughout.
        await run_for(4 * STALL, frame_every=15)
        assert spawned.names == [] and machine.state == "connected"
        assert downlink.last_frame_at == pushed[-1]  # stamped on the session's clock

        # No frame any more: not dead a tick short of one stall window after the last...
        await run_for(pushed[-1] + STALL - MEDIA_TICK - clock.monotonic())
        assert spawned.names == []
        # ...dead once the fake clock is past it, and the recovery decided on the same line.
        await run_for(3 * MEDIA_TICK)
        assert spawned.names == ["link-0:media-recovery-stv"]  # a task of the link's scope
        assert machine.state == "recovering_media"
    finally:
        watchdog.cancel()
        for task in supervisor.standins:
            task.cancel()
        await asyncio.gather(watchdog, *supervisor.standins, return_exceptions=True)
        await track.frames.put(None)
        await lanes.close(1.0)


async def test_the_lanes_stamp_receiver_reports_and_subscriptions_on_the_session_clock() -> None:
    clock = FakeClock()
    lanes = _lanes(clock)
    # A report stamped 0.3 s ago on the clock's wall line arrived 0.3 s ago on its
    # monotonic line; one stamped on aiortc's real wall clock cannot be mapped onto a fake
    # one, and counts as arriving now (never in the fake future or past).
    stamp = datetime.datetime.fromtimestamp(clock.wall() - 0.3, datetime.UTC)
    assert media_module._arrival(stamp, clock) == pytest.approx(clock.monotonic() - 0.3)
    real = datetime.datetime.fromtimestamp(SYSTEM_CLOCK.wall(), datetime.UTC)
    assert media_module._arrival(real, clock) == clock.monotonic()
    assert media_module._arrival(None, clock) == clock.monotonic()
    # The uplink's report cadence reads the same clock when no time is given.
    lanes.asr_cadence.start(clock.monotonic())
    await clock.advance(1.0)
    lanes.asr_cadence.observe()
    assert lanes.asr_report_at == clock.monotonic()
    await lanes.close(1.0)


async def test_the_connect_deadline_runs_on_the_session_clock() -> None:
    clock = FakeClock()
    deadline = Deadline(3.0, clock)
    assert deadline.remaining() == 3.0
    await clock.advance(1.0)
    assert deadline.remaining() == 2.0
    assert deadline.clip(5.0, ErrorCode.JOIN_TIMEOUT) == (2.0, ErrorCode.CONNECT_TIMEOUT)
    assert deadline.clip(1.0, ErrorCode.JOIN_TIMEOUT) == (1.0, ErrorCode.JOIN_TIMEOUT)
    await clock.advance(5.0)
    assert deadline.remaining() == 0.0


async def test_events_are_stamped_on_the_session_clock() -> None:
    clock = FakeClock()
    bus = EventBus(clock)
    assert bus.emit("tick").at == clock.monotonic()
    await clock.advance(2.5)
    assert bus.emit("tick").at == clock.monotonic()
    session = AvatarSession(
        "http://127.0.0.1:9", "token-x", clock=clock, media=False, allow_insecure_transport=True
    )
    seen = session.expect("network_changed")
    session.notify_network_change()
    assert (await seen).at == clock.monotonic()
    await session.close()
