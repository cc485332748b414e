"""Scenarios of the network lab (``avatar_sdk.testing.NetworkLab``): an audio+video session
against the staging backend across a veth pair, turns every few seconds, a kernel-level
fault in the middle, and the figures of what the SDK did. Shared by the lab's tests
(``tests/netlab``: they assert on the figures) and the ``netlab`` benchmark (it tables
them).

Figures, every time on ``time.monotonic()`` from the fault's start (``detection``) or end
(``recovery``): ``detection`` is the first ``network_changed``, ``media_recovering`` or
``reconnecting`` after the fault began; ``recovery`` the first moment after the fault ended
when the session is ``connected`` and downlink video frames are arriving again; frames are
the decoded downlink frames summed over every WHEP lane the session had; a turn is
answered when ``ask()`` returns its reply, and duplicated when the avatar answered it in
more than one agent turn.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from avatar_sdk import AvatarSession, SessionConfig
from avatar_sdk.errors import AvatarError
from avatar_sdk.events.bus import Event
from avatar_sdk.media import ToneSource
from avatar_sdk.testing import NetworkLab
from avatar_sdk.testing.leaks import LeakCheck

#: The lab's session: the product defaults, connect bounds shrunk for a loaded CI machine,
#: and connection_quality every second (the rate-limit figure reads it).
LAB_CONFIG = SessionConfig(
    overall_connect_timeout=15.0,
    asr_timeout=10.0,
    media_recovery_timeout=5.0,
    quality_interval=1.0,
)
WATCHED = (
    "network_changed", "media_recovering", "media_recovered", "reconnecting", "reconnected",
    "turn_resent", "state_changed", "gave_up", "ended", "connection_quality",
)  # fmt: skip

Fault = Callable[[NetworkLab], Awaitable[None]]


@dataclass
class Figures:
    """What one scenario measured (printed as one ``NETLAB {json}`` line)."""

    scenario: str
    fault_seconds: float = 0.0
    detection: float | None = None
    detected_by: str | None = None
    recovery: float | None = None
    tiers: list[str] = field(default_factory=list)
    #: Each recovery's start after the fault: (s from the fault, tier or channel, reason).
    recoveries: list[tuple[float, str, str]] = field(default_factory=list)
    media_recoveries: int = 0
    reconnects: dict[str, int] = field(default_factory=dict)
    turns_sent: int = 0
    turns_answered: int = 0
    turns_duplicated: int = 0
    turns_resent: int = 0
    video_frames: int = 0
    audio_frames: int = 0
    video_fps_before: float | None = None
    video_fps_during: float | None = None
    downlink_kbit: float | None = None
    #: The longest stretch without a new video frame, and where it began (s from the fault).
    longest_video_stall: float = 0.0
    longest_stall_at: float | None = None
    #: Video packets lost for good, skipped to a keyframe; NACKs sent again for missing
    #: packets (transport/rtc/aiortc_patches/video_repair.py), summed over every downlink the
    # session had.
    video_holes_skipped: int = 0
    video_nack_retries: int = 0
    #: The avatar's voice over the whole run (``stats()["voice_buffer"]``, every
    #: subscription): frames concealed for a lost packet, packets dropped as late, packets.
    voice_concealed: int = 0
    voice_late: int = 0
    voice_packets: int = 0
    state_at_fault_end: str = ""
    network_changes: list[str] = field(default_factory=list)
    final_state: str = ""
    errors: list[str] = field(default_factory=list)
    #: Tasks, sockets and peers of the session still open after its close (a leak).
    leaks: list[str] = field(default_factory=list)

    def line(self) -> str:
        return "NETLAB " + json.dumps(asdict(self), default=str)


class _Frames:
    """Downlink frames summed over every lane the session had (a cold rebuild or a WHEP
    re-subscribe replaces them), sampled every 0.1 s; video frames as received from RTP."""

    def __init__(self, session: AvatarSession) -> None:
        self._session = session
        self._done: Counter[str] = Counter()
        self._seen: dict[int, dict[str, int]] = {}
        self.samples: list[tuple[float, int]] = []  # (t, video frames so far)

    def total(self) -> Counter[str]:
        lanes = self._session.media
        stv = lanes.stv if lanes is not None else None
        if stv is not None:
            counts = dict(stv.frames)
            if stv.video_gate is not None:
                # Received, decoded or not: nobody watches the video here, so only the
                # playable gate's first frame is decoded (decode on demand).
                counts["video"] = stv.video_gate.assembled
            if stv.video_repair is not None:  # transport/rtc/aiortc_patches/video_repair.py
                counts["holes_skipped"] = stv.video_repair.holes_skipped
                counts["nack_retries"] = stv.video_repair.nack_retries
            self._seen[id(stv)] = counts
        total: Counter[str] = Counter()
        for counts in self._seen.values():
            total.update(counts)
        return total

    async def run(self) -> None:
        while True:
            self.samples.append((time.monotonic(), self.total()["video"]))
            await asyncio.sleep(0.1)

    def fps(self, start: float, end: float) -> float | None:
        inside = [(t, n) for t, n in self.samples if start <= t <= end]
        if len(inside) < 2 or inside[-1][0] - inside[0][0] <= 0:
            return None
        return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])

    def longest_stall(self) -> tuple[float, float | None]:
        """The longest time between two samples with new video frames, and its start."""
        best, start = 0.0, None
        last_t: float | None = None
        last_n = -1
        for t, n in self.samples:
            if n != last_n:
                if last_t is not None and t - last_t > best:
                    best, start = t - last_t, last_t
                last_t, last_n = t, n
        if last_t is not None and self.samples and self.samples[-1][0] - last_t > best:
            best, start = self.samples[-1][0] - last_t, last_t
        return best, start

    def flowing_since(self, after: float) -> float | None:
        """The first sample time after ``after`` from which frames grew within 0.5 s."""
        for i, (t, n) in enumerate(self.samples):
            if t < after:
                continue
            later = [m for u, m in self.samples[i:] if u <= t + 0.5]
            if later and later[-1] > n:
                return t
        return None


async def run_scenario(
    name: str,
    fault: Fault,
    *,
    before: float = 1.0,
    settle_timeout: float = 60.0,
    turn_every: float = 1.0,
    config: SessionConfig = LAB_CONFIG,
    staging_options: dict[str, Any] | None = None,
    expect_recovery: bool = True,
) -> Figures:
    """Open a lab, connect an audio+video session, ask a turn every ``turn_every`` s,
    run ``fault(lab)`` after ``before`` s (it returns when the fault is over), then wait
    for the session to be connected with video flowing (``settle_timeout``), and one more
    turn answered after it."""
    figures = Figures(name)
    async with NetworkLab() as lab, lab.staging(**(staging_options or {})) as staging:
        with lab.client():  # every socket the session opens: the client namespace
            check = LeakCheck()
            session = AvatarSession(
                staging.url,
                staging.token,
                audio=ToneSource(),
                allow_insecure_transport=True,
                config=config,
            )
            events: list[tuple[float, Event]] = []
            for event_name in WATCHED:
                session.on(event_name, lambda e: events.append((time.monotonic(), e)))
            spoken: dict[str, str] = {}

            def on_text(event: Event) -> None:
                if event.data.get("type") == "avatar":
                    turn = str(event.data.get("turn_id"))
                    spoken[turn] = spoken.get(turn, "") + str(event.data.get("content", ""))

            session.on("agent_text", on_text)
            frames = _Frames(session)
            try:
                await session.connect()
                sampler = asyncio.ensure_future(frames.run())
                markers: list[str] = []
                stop_turns = asyncio.Event()
                after_fault = asyncio.Event()  # set as each turn starts

                async def turns() -> None:
                    while not stop_turns.is_set():
                        marker = f"turn-{len(markers) + 1}-{secrets.token_hex(3)}"
                        markers.append(marker)
                        figures.turns_sent += 1
                        after_fault.set()
                        try:
                            reply = await session.ask(marker, timeout=45.0)
                        except (AvatarError, TimeoutError) as exc:
                            figures.errors.append(f"{marker}: {type(exc).__name__} {exc}")
                        else:
                            if marker in reply.text:
                                figures.turns_answered += 1
                        await asyncio.sleep(turn_every)

                asker = asyncio.ensure_future(turns())
                try:
                    await asyncio.sleep(before)
                    fault_at = time.monotonic()
                    await fault(lab)
                    over_at = time.monotonic()
                    figures.fault_seconds = over_at - fault_at
                    figures.state_at_fault_end = session.state
                    settled = await _settle(session, frames, over_at, settle_timeout)
                    if expect_recovery or settled is None or settled > over_at + 0.5:
                        figures.recovery = None if settled is None else settled - over_at
                    # One more turn after the fault: let the turn loop finish its current
                    # ask and the next one, then stop it.
                    after_fault.clear()
                    await asyncio.wait_for(after_fault.wait(), 60.0)
                    stop_turns.set()
                    await asyncio.wait_for(asker, 60.0)
                finally:
                    stop_turns.set()
                    asker.cancel()
                    sampler.cancel()
                    await asyncio.gather(asker, sampler, return_exceptions=True)
                _fill(
                    figures,
                    events=events,
                    frames=frames,
                    spoken=spoken,
                    markers=markers,
                    window=(fault_at, over_at),
                )
                figures.final_state = session.state
                voice = session.stats().get("voice_buffer", {})
                figures.voice_concealed = int(voice.get("concealed", 0))
                figures.voice_late = int(voice.get("late", 0))
                figures.voice_packets = int(voice.get("packets", 0))
            finally:
                await session.close()
            figures.leaks = await check.settle(5.0)
    return figures


async def _settle(
    session: AvatarSession, frames: _Frames, after: float, timeout: float
) -> float | None:
    """When, after ``after``, the session was connected with video flowing (None: not
    within ``timeout``)."""
    deadline = after + timeout
    while time.monotonic() < deadline:
        if session.state == "connected":
            since = frames.flowing_since(after)
            if since is not None:
                return since
        await asyncio.sleep(0.1)
    return None


def _fill(
    figures: Figures,
    *,
    events: list[tuple[float, Event]],
    frames: _Frames,
    spoken: dict[str, str],
    markers: list[str],
    window: tuple[float, float],
) -> None:
    fault_at, over_at = window
    reconnects: Counter[str] = Counter()
    bitrates: list[float] = []
    for at, event in events:
        name = event.name
        if at >= fault_at and figures.detection is None and name in (
            "network_changed", "media_recovering", "reconnecting",
        ):  # fmt: skip
            figures.detection = at - fault_at
            figures.detected_by = name
        if name == "reconnecting" and at >= fault_at:
            tier = str(event.data.get("tier"))
            if event.data.get("attempt") == 1:
                reconnects[tier] += 1
                figures.recoveries.append((at - fault_at, tier, str(event.data.get("reason"))))
            if tier not in figures.tiers:
                figures.tiers.append(tier)
        elif name == "media_recovering" and at >= fault_at:
            figures.media_recoveries += 1
            channel = str(event.data.get("channel"))
            figures.recoveries.append((at - fault_at, channel, str(event.data.get("reason"))))
            if "media" not in figures.tiers:
                figures.tiers.append("media")
        elif name == "turn_resent":
            figures.turns_resent += 1
        elif name == "network_changed":
            figures.network_changes.append(str(event.data.get("detail", "")))
        elif (
            name == "connection_quality"
            and fault_at <= at <= over_at
            and event.data.get("channel") == "stv"
            and event.data.get("bitrate") is not None
        ):
            bitrates.append(float(event.data["bitrate"]))
    figures.reconnects = dict(reconnects)
    if bitrates:
        figures.downlink_kbit = sorted(bitrates)[len(bitrates) // 2] / 1000
    total = frames.total()
    figures.video_frames, figures.audio_frames = total["video"], total["audio"]
    figures.video_holes_skipped = total["holes_skipped"]
    figures.video_nack_retries = total["nack_retries"]
    start = frames.samples[0][0] if frames.samples else fault_at
    figures.video_fps_before = frames.fps(start, fault_at)
    figures.video_fps_during = frames.fps(fault_at, over_at)
    stall, stall_at = frames.longest_stall()
    figures.longest_video_stall = stall
    figures.longest_stall_at = None if stall_at is None else stall_at - fault_at
    for marker in markers:
        answers = sum(1 for text in spoken.values() if f"You said: {marker}" in text)
        figures.turns_duplicated += max(0, answers - 1)


# -- faults ---------------------------------------------------------------------------------
def loss(percent: float, seconds: float) -> Fault:
    async def run(lab: NetworkLab) -> None:
        async with await lab.loss(percent, direction="both", protocol="udp"):
            await asyncio.sleep(seconds)

    return run


def blackhole(seconds: float, protocol: str = "all") -> Fault:
    async def run(lab: NetworkLab) -> None:
        async with await lab.blackhole(protocol=protocol):  # type: ignore[arg-type]
            await asyncio.sleep(seconds)

    return run


def reject(protocol: str, seconds: float) -> Fault:
    async def run(lab: NetworkLab) -> None:
        async with await lab.reject(protocol):  # type: ignore[arg-type]
            await asyncio.sleep(seconds)

    return run


def flap(seconds: float) -> Fault:
    async def run(lab: NetworkLab) -> None:
        await lab.flap(seconds)

    return run


def address_change() -> Fault:
    async def run(lab: NetworkLab) -> None:
        await lab.change_address()

    return run


def rate_limit(kbit: float, seconds: float) -> Fault:
    async def run(lab: NetworkLab) -> None:
        async with await lab.rate_limit(kbit, direction="down"):
            await asyncio.sleep(seconds)

    return run
