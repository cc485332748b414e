"""Figure 5: recovery time per tier, from the injected fault to a verified-usable session.

One A/V session (``ToneSource`` uplink, video on, default ``SessionConfig``) against an
in-process staging server (the faults are its methods; its aiortc peers share this
process and event loop). Event callbacks are registered before ``connect()``, and every
event is stamped with ``time.monotonic()`` inside the emitting call, the clock the SDK
uses for its own marks (``first_frame_at``, ``connected_at``, ``last_activity``). Each
fault is timed from a ``time.monotonic()`` taken just before the fault call. Before every
round the session is ``connected`` with one second of steady media (video frames
decoded, no recovery started); a recovery that starts during that second is counted as
unprovoked and the second starts again.

* ASR (uplink): ``faults.ice_failure("asr")`` closes the server peer; the client sees
  its peer ``closed``, builds a fresh one and renegotiates it over the live socket
  (``is_reconnect: true``); recovered once the new peer's ICE and DTLS are connected and
  its sender has sent RTP (the server's first RTCP receiver report, 0.5-1.5 s later, is
  not waited for). ``media_recovering`` = detected, new uplink ``connected_at`` =
  transport up, ``media_recovered`` = verified (its ``duration`` is the SDK's own
  measurement). Also its own figure, ``python -m benchmarks --only asr``: the same
  rounds without the other parts.
* STV (downlink): ``faults.ice_failure("stv")``; WHEP re-subscribe, verified by a newly
  decoded video frame.
* cold: ``faults.drop_socket(recovery=False)``; the server refuses connection-state
  recovery, so the session rebuilds everything on a new socket (same thread): the first
  decoded frame of the new downlink, then the playable gate's settle and the approval,
  then ``reconnected`` {tier: cold}.
* dead downlink: ``faults.media_stall("stv", seconds=None)`` (ICE up, no frames) until
  ``media_recovering``; then ``faults.clear()`` and the re-subscribe runs to
  ``media_recovered``.
* silently dead socket: ``faults.silent_socket(server_timeout=0.5)`` (a vanished peer: no
  byte, no close, no FIN either way; the server times the socket out itself after 0.5 s,
  before any probe can give up, so the session is restored in place) until the SDK's probe
  gives up (``reconnecting``); the quiet time the socket already had at the fault is
  recorded (the probe counts from the last inbound event, not from the fault).

The socket tier (a transport that closes) is figure 2 (``recovery.py``), not repeated here.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from avatar_sdk import AvatarSession, RetryPolicy, SessionConfig
from avatar_sdk.events.bus import Event
from avatar_sdk.media import ToneSource
from avatar_sdk.testing import StagingServer
from avatar_sdk.transport.rtc.media import GATE_SETTLE

from .harness import ms, wait_state
from .stats import FigureResult, Row, Summary, Target, ratio

TITLE = "resilience: fault -> verified-usable, per tier"

STEADY = 1.0
ROUND_TIMEOUT = 20.0
#: The staging server times a silent socket out after this long (well before the probe,
#: at least ``socket_probe_timeout`` after the fault, can judge it dead): in-place recovery.
SILENT_SERVER_TIMEOUT = 0.5
CONNECT_TIMEOUT = 20.0
#: The SDK's watchdogs tick every 0.1 s (media) and 0.5 s (socket); a round that ends
#: inside a watchdog's task would phase-lock the next fault to its tick, so each steady
#: wait gets a random extra of up to one tick.
MEDIA_TICK = 0.1
SOCKET_TICK = 0.5
#: Every part gets at least this many counted rounds, whatever its time cap says.
MIN_ROUNDS = 3

RECORDED = (
    "state_changed",
    "media_recovering",
    "media_recovered",
    "reconnecting",
    "reconnected",
    "error",
    "ended",
)
DISTURBANCES = ("media_recovering", "reconnecting")

# Physical floor (/work/shared/RECOVERY-NOTES.md, loopback): a fresh send-only audio pc or a
# WHEP re-subscribe gives the first RTP at the far side after 55 ms and the first decoded
# frame after 135 ms (ICE restart: 36 / 117 ms).
FLOOR_FIRST_RTP_MS = 55.0
FLOOR_FIRST_FRAME_MS = 135.0
FLOOR_ICE_RESTART_MS = (36.0, 117.0)
# The reference client's fixed delays (PROTOCOL.md §4.1-§4.3), seconds.
REF_ICE_GRACE = 1.5
REF_STUCK_WATCHDOG = 10.0
REF_RECONNECT_WINDOW = 22.0
REF_ASR_WAIT = 30.0
REF_PING_TIMEOUT = 45.0  # Engine.IO: pingInterval 25 s + pingTimeout 20 s


@dataclass(frozen=True)
class Plan:
    """One part of the figure: counted rounds, warm-up rounds, and a time cap after which
    no new round starts (once ``MIN_ROUNDS`` are counted)."""

    key: str
    rounds: int
    warmup: int
    cap: float
    phase: float


# No warm-up rounds: connect() has already paid the first-use costs (codecs, WHEP, ICE).
# About 90 s in all: ~2.2 s per ASR round, ~1.2 STV, ~1.5 cold, ~3.3 stall, ~6.5 silent.
PLANS = {
    "asr": Plan("asr", 10, 0, 24.0, MEDIA_TICK),
    "stv": Plan("stv", 10, 0, 15.0, MEDIA_TICK),
    "cold": Plan("cold", 10, 0, 18.0, MEDIA_TICK),
    "stall": Plan("stall", 5, 0, 18.0, MEDIA_TICK),
    "silent": Plan("silent", 4, 0, 28.0, SOCKET_TICK),
}

ASR_TARGET = Target("<", 150.0, "ms")
ASR_LABEL = "ASR uplink recovery: fault -> media_recovered"
ASR_TITLE = "ASR uplink recovery: ice_failure('asr') -> media_recovered"
STV_TARGET = Target("<", 300.0, "ms")
COLD_TARGET = Target("<", 1.0, "s")
STALL_TARGET = Target("<", 2.5, "s")
SILENT_TARGET = Target("<", 6.0, "s")


class Fallback(Exception):
    """A round that did not recover on the tier under test (reported, not counted)."""


# --------------------------------------------------------------------------- timeline


@dataclass(frozen=True, slots=True)
class Seen:
    """One event as a callback saw it; ``at`` is ``time.monotonic()`` inside the callback."""

    name: str
    at: float
    data: dict[str, Any]

    def matches(self, name: str, match: dict[str, Any]) -> bool:
        return self.name == name and all(self.data.get(k) == v for k, v in match.items())


class Timeline:
    """Every recorded event of one session, in order. Register it before connecting."""

    def __init__(self, session: AvatarSession, names: tuple[str, ...] = RECORDED) -> None:
        self.seen: list[Seen] = []
        self._changed = asyncio.Event()
        for name in names:
            session.on(name, self._record)

    def _record(self, event: Event) -> None:
        self.seen.append(Seen(event.name, time.monotonic(), dict(event.data)))
        self._changed.set()

    def mark(self) -> int:
        return len(self.seen)

    def find(self, mark: int, name: str, **match: Any) -> Seen | None:
        """The first ``name`` event (with ``match`` in its data) since ``mark``."""
        return next((s for s in self.seen[mark:] if s.matches(name, match)), None)

    def since(self, mark: int, *names: str) -> list[Seen]:
        return [s for s in self.seen[mark:] if s.name in names]

    async def wait(
        self, mark: int, name: str, timeout: float, abort: str | None = None, **match: Any
    ) -> Seen:
        """Wait for :meth:`find`. ``Fallback`` if an ``abort`` event comes first (a recovery
        escalated to another tier), ``RuntimeError`` if the session ends, ``TimeoutError``
        after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.find(mark, name, **match)
            if found is not None:
                return found
            escalated = self.find(mark, abort) if abort is not None else None
            if escalated is not None:
                raise Fallback(f"waiting for {name}: {abort} {escalated.data}")
            ended = self.find(mark, "ended")
            if ended is not None:
                raise RuntimeError(f"the session ended waiting for {name}: {ended.data}")
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {name} {match or ''} within {timeout:g} s")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except TimeoutError:
                continue


# --------------------------------------------------------------------------- session helpers


#: The default config but for the cold tier's ``stable_after``: the figure forces cold
#: rebuilds back to back by design, which the streak rule reads as a flapping server (a
#: rebuild lost within ``stable_after`` counts against the budget) and gives up after six.
BENCH_CONFIG = SessionConfig(cold_reconnect=RetryPolicy(stable_after=0.0))


def media_session(staging: StagingServer) -> AvatarSession:
    """The A/V session the brief prescribes (default config, tone uplink)."""
    return AvatarSession(
        staging.url,
        staging.token,
        audio=ToneSource(),
        allow_insecure_transport=True,
        config=BENCH_CONFIG,
    )


def _frames_received(session: AvatarSession) -> int:
    """Video frames handed to the application track so far (survives new lanes)."""
    track = session.avatar_video
    return track.received if track is not None else 0


def _media_up(session: AvatarSession) -> bool:
    lanes = session.media
    return (
        lanes is not None
        and lanes.asr is not None
        and lanes.asr.pc.connectionState == "connected"
        and lanes.stv is not None
        and lanes.stv.pc.connectionState == "connected"
    )


@dataclass
class Part:
    """What one part measured: samples (seconds) per metric, and what went wrong."""

    plan: Plan
    samples: list[dict[str, float]] = field(default_factory=list)
    fallbacks: list[str] = field(default_factory=list)
    stopped: str = "all rounds ran"
    seconds: float = 0.0

    def values(self, metric: str) -> list[float]:
        return [s[metric] for s in self.samples]

    def summary_ms(self, metric: str) -> Summary:
        return Summary.of(self.values(metric)).scaled(1000.0)

    def summary_s(self, metric: str) -> Summary:
        return Summary.of(self.values(metric))


class Bench:
    """The session, its timeline and the staging server, plus the round loop."""

    def __init__(self, staging: StagingServer, session: AvatarSession) -> None:
        self.staging = staging
        self.session = session
        self.timeline = Timeline(session)
        self.unprovoked: list[str] = []
        #: (stamp, last decoded downlink frame) at each media_recovering, read in the
        #: callback: once the recovery runs, the old downlink may decode a few more frames.
        self.last_frame_at_detection: list[tuple[float, float | None]] = []
        session.on("media_recovering", self._on_recovering)

    def _on_recovering(self, event: Event) -> None:
        lanes = self.session.media
        stv = lanes.stv if lanes is not None else None
        last = stv.last_frame_at if stv is not None else None
        self.last_frame_at_detection.append((time.monotonic(), last))

    async def steady(
        self, seconds: float = STEADY, phase: float = 0.0, timeout: float = ROUND_TIMEOUT
    ) -> None:
        """Return after ``seconds`` (plus up to ``phase``, random) of steady media:
        connected, both peers up, new video frames decoded, no recovery started. A recovery
        during the wait is unprovoked."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {seconds:g} s of steady media within {timeout:g} s")
            await wait_state(self.session, "connected", left)
            mark = self.timeline.mark()
            frames = _frames_received(self.session)
            await asyncio.sleep(seconds + random.uniform(0.0, phase))
            disturbed = self.timeline.since(mark, *DISTURBANCES)
            for seen in disturbed:
                self.unprovoked.append(
                    f"{seen.name} {seen.data.get('channel') or seen.data.get('tier')}: "
                    f"{seen.data.get('reason')}"
                )
            if (
                not disturbed
                and self.session.state == "connected"
                and _media_up(self.session)
                and _frames_received(self.session) > frames
            ):
                return

    async def part(self, plan: Plan, one: Callable[[], Awaitable[dict[str, float]]]) -> Part:
        """``plan.warmup + plan.rounds`` rounds of ``one`` (each after a steady second)."""
        part = Part(plan)
        started = time.monotonic()
        counted = 0
        for index in range(plan.warmup + plan.rounds):
            if counted >= MIN_ROUNDS and time.monotonic() - started > plan.cap:
                part.stopped = f"time cap {plan.cap:g} s after {counted} rounds"
                break
            await self.steady(phase=plan.phase)
            try:
                sample = await one()
            except Fallback as fallback:
                part.fallbacks.append(str(fallback))
                continue
            if index < plan.warmup:
                continue
            part.samples.append(sample)
            counted += 1
        part.seconds = time.monotonic() - started
        if not part.samples:
            raise RuntimeError(f"{plan.key}: no round recovered as expected: {part.fallbacks[:3]}")
        return part

    # -- rounds -------------------------------------------------------------------------------
    async def asr_round(self) -> dict[str, float]:
        tl = self.timeline
        mark = tl.mark()
        started = time.monotonic()
        failed = await self.staging.faults.ice_failure("asr")
        recovered = await tl.wait(
            mark, "media_recovered", ROUND_TIMEOUT, abort="reconnecting", channel="asr"
        )
        self._no_fallback(mark, "asr")
        detected = tl.find(mark, "media_recovering", channel="asr")
        lanes = self.session.media
        if failed != 1 or detected is None or lanes is None or lanes.asr is None:
            raise Fallback(f"asr: {failed} peers failed, detection {detected}")
        up = lanes.asr.connected_at
        if up is None:
            raise Fallback("asr: recovered without a connected uplink")
        return {
            "detect": detected.at - started,
            "transport_up": up - started,
            "verified": recovered.at - started,
            "sdk": float(recovered.data["duration"]),
            "after_detect": recovered.at - detected.at,
        }

    async def stv_round(self) -> dict[str, float]:
        tl = self.timeline
        mark = tl.mark()
        started = time.monotonic()
        failed = await self.staging.faults.ice_failure("stv")
        recovered = await tl.wait(
            mark, "media_recovered", ROUND_TIMEOUT, abort="reconnecting", channel="stv"
        )
        self._no_fallback(mark, "stv")
        detected = tl.find(mark, "media_recovering", channel="stv")
        lanes = self.session.media
        stv = lanes.stv if lanes is not None else None
        first = stv.first_frame_at.get("video") if stv is not None else None
        answered = stv.subscribed_at if stv is not None else None
        if failed != 1 or detected is None or first is None or answered is None:
            raise Fallback(f"stv: {failed} viewers failed, detection {detected}")
        return {
            "detect": detected.at - started,
            "whep_answered": answered - started,
            "first_frame": first - started,
            "verified": recovered.at - started,
            "sdk": float(recovered.data["duration"]),
        }

    async def cold_round(self) -> dict[str, float]:
        tl = self.timeline
        mark = tl.mark()
        started = time.monotonic()
        dropped = await self.staging.faults.drop_socket(recovery=False)
        reconnected = await tl.wait(mark, "reconnected", ROUND_TIMEOUT)
        if reconnected.data.get("tier") != "cold":
            raise Fallback(f"cold: recovered on the {reconnected.data.get('tier')} tier")
        cold = tl.find(mark, "reconnecting", tier="cold")
        lanes = self.session.media
        stv = lanes.stv if lanes is not None else None
        first = stv.first_frame_at.get("video") if stv is not None else None
        if dropped != 1 or cold is None or lanes is None or first is None or first < started:
            raise Fallback(f"cold: dropped {dropped}, no new downlink frame")
        return {
            "cold_started": cold.at - started,
            "first_frame": first - started,
            "reconnected": reconnected.at - started,
            "sdk": float(reconnected.data["duration"]),
            "gate_settle": reconnected.at - first,
            "gate_waited": lanes.gate_waited or 0.0,
            "gate_capped": float(lanes.gate_capped),
        }

    async def stall_round(self) -> dict[str, float]:
        tl = self.timeline
        mark = tl.mark()
        started = time.monotonic()
        await self.staging.faults.media_stall("stv", seconds=None)
        try:
            detected = await tl.wait(
                mark, "media_recovering", ROUND_TIMEOUT, abort="reconnecting", channel="stv"
            )
        finally:
            self.staging.faults.clear()
        cleared = time.monotonic()
        recovered = await tl.wait(
            mark, "media_recovered", ROUND_TIMEOUT, abort="reconnecting", channel="stv"
        )
        self._no_fallback(mark, "stall")
        last = next((f for t, f in self.last_frame_at_detection if t >= started), None)
        if last is None or last > detected.at:
            raise Fallback("stall: no decoded frame before the detection")
        return {
            "detect": detected.at - started,
            "silent_before_detect": detected.at - last,
            "frames_after_fault": last - started,
            "clear_to_recovered": recovered.at - cleared,
        }

    async def silent_round(self) -> dict[str, float]:
        tl = self.timeline
        link = self.session._slot.current  # the SDK's own quietness clock lives here
        if link is None:
            raise RuntimeError("no control channel")
        channel = link.channel
        mark = tl.mark()
        started = time.monotonic()
        quiet = started - channel.last_activity
        blackholed = self.staging.faults.silent_socket(server_timeout=SILENT_SERVER_TIMEOUT)
        detected = await tl.wait(mark, "reconnecting", ROUND_TIMEOUT)
        reconnected = await tl.wait(mark, "reconnected", ROUND_TIMEOUT)
        if blackholed < 1:
            raise Fallback("silent: no socket blackholed")
        return {
            "quiet_at_fault": quiet,
            "detect": detected.at - started,
            "detect_since_quiet": detected.at - started + quiet,
            "reconnected": reconnected.at - started,
            "socket_tier": float(reconnected.data.get("tier") == "socket"),
        }

    def _no_fallback(self, mark: int, what: str) -> None:
        cold = self.timeline.find(mark, "reconnecting")
        if cold is not None:
            raise Fallback(f"{what}: escalated to {cold.data}")


# --------------------------------------------------------------------------- figure


#: The parts in the order they run (last: a blackholed server socket lingers until
#: Engine.IO times it out).
PART_ORDER = ("asr", "stv", "cold", "stall", "silent")


async def _measure(keys: tuple[str, ...] = PART_ORDER) -> tuple[dict[str, Part], dict[str, Any]]:
    async with StagingServer() as staging:
        session = media_session(staging)
        bench = Bench(staging, session)
        rounds = {
            "asr": bench.asr_round,
            "stv": bench.stv_round,
            "cold": bench.cold_round,
            "stall": bench.stall_round,
            "silent": bench.silent_round,
        }
        try:
            await asyncio.wait_for(session.connect(), CONNECT_TIMEOUT)
            # "silent" last: a silenced server connection is held open until the server stops.
            parts = {key: await bench.part(PLANS[key], rounds[key]) for key in keys}
            stats = session.stats()
        finally:
            await session.close()
        info = {
            "unprovoked_recoveries": bench.unprovoked,
            "sdk_reconnects": stats["reconnects"],
            "dead_socket_detections": stats.get("dead_socket_detections", 0),
            "server_recoveries": staging.sio.recoveries,
            "server_refused_recoveries": staging.sio.refused_recoveries,
            "whep_statuses": {
                str(s): staging.media.whep_statuses.count(s)
                for s in sorted(set(staging.media.whep_statuses))
            },
            "faults_injected": len(staging.faults.injected),
        }
    return parts, info


def _row(label: str, summary: Summary, unit: str, target: Target | None = None) -> Row:
    return Row(label, summary.n, summary.median, unit, summary.p90, summary.maximum, target)


def _verdicts(target: Target, summary: Summary) -> str:
    return (
        f"target {target.label()}: median {target.verdict(summary.median)}, "
        f"p90 {target.verdict(summary.p90)}"
    )


def _asr(part: Part) -> tuple[list[Row], list[str], dict[str, Any]]:
    detect, up = part.summary_ms("detect"), part.summary_ms("transport_up")
    verified, sdk = part.summary_ms("verified"), part.summary_ms("sdk")
    proof = part.summary_ms("after_detect")
    rows = [
        _row("ASR: fault -> media_recovering (detect)", detect, "ms"),
        _row("ASR: fault -> new uplink connected", up, "ms"),
        _row(ASR_LABEL, verified, "ms", ASR_TARGET),
        _row("ASR: SDK media_recovered.duration", sdk, "ms"),
    ]
    notes = [
        f"ASR: {_verdicts(ASR_TARGET, verified)}. The new uplink peer is connected (ICE and "
        f"DTLS up) {up.median:.0f} ms after the fault ({up.median / FLOOR_FIRST_RTP_MS:.1f}x "
        f"the {FLOOR_FIRST_RTP_MS:g} ms first-RTP floor of a fresh send-only pc); 'verified' "
        f"adds the sender's first RTP packet (not the server's first RTCP receiver report, "
        f"which aiortc sends 0.5-1.5 s after its receiver starts): verified median "
        f"{verified.median:.0f} ms = {verified.median / FLOOR_FIRST_RTP_MS:.1f}x the first-RTP "
        f"floor; detection (the 0.1 s media watchdog tick) to verified {proof.median:.0f} ms "
        f"median ({proof.minimum:.0f}-{proof.maximum:.0f}). Reference client: recovers at "
        f"once on ICE 'failed' or after the {REF_ICE_GRACE:g} s 'disconnected' grace, then an "
        f"ICE restart awaiting the answer for up to {REF_ASR_WAIT:g} s and verifying nothing.",
    ]
    data = {
        "target": ASR_TARGET.as_json(),
        "detect": detect.as_json("ms"),
        "transport_up": up.as_json("ms"),
        "verified": verified.as_json("ms"),
        "sdk_duration": sdk.as_json("ms"),
        "detect_to_verified": proof.as_json("ms"),
        "pass": {"median": ASR_TARGET.met(verified.median), "p90": ASR_TARGET.met(verified.p90)},
        "ratios": {
            "transport_up_vs_first_rtp_floor": ratio(up.median, FLOOR_FIRST_RTP_MS),
            "verified_vs_first_rtp_floor": ratio(verified.median, FLOOR_FIRST_RTP_MS),
            "verified_vs_target": ratio(verified.median, ASR_TARGET.threshold),
            "verified_vs_reference_grace": ratio(verified.median, REF_ICE_GRACE * 1000.0),
        },
    }
    return rows, notes, data


def _stv(part: Part) -> tuple[list[Row], list[str], dict[str, Any]]:
    detect, whep = part.summary_ms("detect"), part.summary_ms("whep_answered")
    first, verified = part.summary_ms("first_frame"), part.summary_ms("verified")
    sdk = part.summary_ms("sdk")
    rows = [
        _row("STV: fault -> media_recovering (detect)", detect, "ms"),
        _row("STV: fault -> WHEP answer applied", whep, "ms"),
        _row("STV: fault -> media_recovered (1st frame)", verified, "ms", STV_TARGET),
        _row("STV: SDK media_recovered.duration", sdk, "ms"),
    ]
    notes = [
        f"STV: {_verdicts(STV_TARGET, verified)}; verified median {verified.median:.0f} ms = "
        f"{verified.median / FLOOR_FIRST_FRAME_MS:.2f}x the {FLOOR_FIRST_FRAME_MS:g} ms "
        f"re-subscribe first-frame floor (SDK duration, detection excluded: "
        f"{sdk.median / FLOOR_FIRST_FRAME_MS:.2f}x); new frame decoded "
        f"{first.median:.0f} ms after the fault. Reference client: {REF_ICE_GRACE:g} s "
        f"'disconnected' grace (none on 'failed'), then re-subscribe plus the playable gate "
        f"({GATE_SETTLE:g} s settle), i.e. >= {REF_ICE_GRACE + GATE_SETTLE:g} s on a "
        f"disconnected path before the same frame counts.",
    ]
    data = {
        "target": STV_TARGET.as_json(),
        "detect": detect.as_json("ms"),
        "whep_answered": whep.as_json("ms"),
        "first_frame": first.as_json("ms"),
        "verified": verified.as_json("ms"),
        "sdk_duration": sdk.as_json("ms"),
        "pass": {"median": STV_TARGET.met(verified.median), "p90": STV_TARGET.met(verified.p90)},
        "ratios": {
            "verified_vs_first_frame_floor": ratio(verified.median, FLOOR_FIRST_FRAME_MS),
            "sdk_vs_first_frame_floor": ratio(sdk.median, FLOOR_FIRST_FRAME_MS),
            "verified_vs_target": ratio(verified.median, STV_TARGET.threshold),
        },
    }
    return rows, notes, data


def _cold(part: Part) -> tuple[list[Row], list[str], dict[str, Any]]:
    started = part.summary_ms("cold_started")
    first, reconnected = part.summary_s("first_frame"), part.summary_s("reconnected")
    sdk, settle = part.summary_ms("sdk"), part.summary_ms("gate_settle")
    capped = int(sum(part.values("gate_capped")))
    rows = [
        _row("cold: fault -> cold tier started", started, "ms"),
        _row("cold: fault -> first new decoded frame", first, "s", COLD_TARGET),
        _row("cold: fault -> reconnected (usable)", reconnected, "s"),
        _row("cold: SDK reconnected.duration", sdk, "ms"),
        _row("cold: first frame -> reconnected (gate)", settle, "ms"),
    ]
    notes = [
        f"cold: {_verdicts(COLD_TARGET, first)} for the first new frame "
        f"({ms(first.median) / FLOOR_FIRST_FRAME_MS:.1f}x the {FLOOR_FIRST_FRAME_MS:g} ms "
        f"re-subscribe floor, with a new socket, join, ASR and WHEP on the way); "
        f"'reconnected' (usable) median {reconnected.median:.2f} s, "
        f"{COLD_TARGET.verdict(reconnected.median)} against the same bound: it includes the "
        f"playable gate, which runs on cold reconnects too ({GATE_SETTLE:g} s settle after the "
        f"first frame, then approvedPermissions): first frame -> reconnected median "
        f"{settle.median:.0f} ms (gate capped {capped}x). Reference client: the same full "
        f"connect and gate; the socket tier before it may wait up to {REF_RECONNECT_WINDOW:g} s "
        f"(reconnect window).",
    ]
    data = {
        "target": COLD_TARGET.as_json(),
        "cold_started": started.as_json("ms"),
        "first_frame": first.scaled(1000.0).as_json("ms"),
        "reconnected": reconnected.scaled(1000.0).as_json("ms"),
        "sdk_duration": sdk.as_json("ms"),
        "first_frame_to_reconnected": settle.as_json("ms"),
        "sdk_gate_waited": part.summary_ms("gate_waited").as_json("ms"),
        "gate_settle_s": GATE_SETTLE,
        "gate_capped": capped,
        "pass": {
            "first_frame_median": COLD_TARGET.met(first.median),
            "first_frame_p90": COLD_TARGET.met(first.p90),
            "reconnected_median": COLD_TARGET.met(reconnected.median),
        },
        "ratios": {
            "first_frame_vs_first_frame_floor": ratio(ms(first.median), FLOOR_FIRST_FRAME_MS),
            "first_frame_vs_target": ratio(first.median, COLD_TARGET.threshold),
            "reconnected_vs_target": ratio(reconnected.median, COLD_TARGET.threshold),
        },
    }
    return rows, notes, data


def _stall(part: Part, stall_timeout: float) -> tuple[list[Row], list[str], dict[str, Any]]:
    detect, silent = part.summary_s("detect"), part.summary_s("silent_before_detect")
    tail = part.summary_ms("frames_after_fault")
    back = part.summary_ms("clear_to_recovered")
    rows = [
        _row("dead downlink: fault -> media_recovering", detect, "s", STALL_TARGET),
        _row("  last decoded frame -> media_recovering", silent, "s"),
        _row("  clear() -> media_recovered", back, "ms"),
    ]
    notes = [
        f"dead downlink (frames stop, ICE up): {_verdicts(STALL_TARGET, detect)}; the floor is "
        f"the configured media_stall_timeout ({stall_timeout:g} s): detection median "
        f"{detect.median:.2f} s = timeout + {ms(detect.median - stall_timeout):.0f} ms "
        f"(0.1 s watchdog tick; frames already in flight arrived up to "
        f"{tail.maximum:.0f} ms after the fault). Reference client: no frame liveness; a "
        f"stalled downlink with ICE up is never detected (its {REF_STUCK_WATCHDOG:g} s "
        f"watchdog covers only peers stuck in new/checking).",
    ]
    data = {
        "target": STALL_TARGET.as_json(),
        "media_stall_timeout_s": stall_timeout,
        "detect": detect.scaled(1000.0).as_json("ms"),
        "last_frame_to_detect": silent.scaled(1000.0).as_json("ms"),
        "frames_after_fault": tail.as_json("ms"),
        "clear_to_recovered": back.as_json("ms"),
        "pass": {"median": STALL_TARGET.met(detect.median), "p90": STALL_TARGET.met(detect.p90)},
        "ratios": {"detect_vs_stall_timeout": ratio(detect.median, stall_timeout)},
    }
    return rows, notes, data


def _silent(part: Part, config: SessionConfig) -> tuple[list[Row], list[str], dict[str, Any]]:
    detect, since = part.summary_s("detect"), part.summary_s("detect_since_quiet")
    quiet, back = part.summary_s("quiet_at_fault"), part.summary_s("reconnected")
    socket_tier = int(sum(part.values("socket_tier")))
    bound = config.socket_probe_interval + config.socket_probe_timeout
    step = min(0.5, config.socket_probe_interval / 4)
    rows = [
        _row("dead socket: fault -> reconnecting", detect, "s", SILENT_TARGET),
        _row("  last inbound event -> reconnecting", since, "s"),
        _row("  socket quiet at fault time", quiet, "s"),
        _row("  fault -> reconnected", back, "s"),
    ]
    notes = [
        f"dead socket (no close, no pings): {_verdicts(SILENT_TARGET, detect)}. The probe "
        f"counts from the last inbound event, not from the fault: the socket had been quiet "
        f"{quiet.minimum:.2f}-{quiet.maximum:.2f} s (median {quiet.median:.2f}) when it died, "
        f"and detection came {since.minimum:.2f}-{since.maximum:.2f} s after the last inbound "
        f"event (design: socket_probe_interval {config.socket_probe_interval:g} s, checked "
        f"every {step:g} s, + socket_probe_timeout {config.socket_probe_timeout:g} s = "
        f"{bound:g}-{bound + step:g} s). A quiet socket is probed every "
        f"~{config.socket_probe_interval:g} s, so fault -> detection lies between "
        f"~{config.socket_probe_timeout:g} s and {bound + step:g} s depending on the phase. "
        f"The last inbound event before these faults came from the SDK's own probe or "
        f"socket-tier reconnect, which run in step with the watchdog's {step:g} s tick, so "
        f"detection lands at the low end of that range; with inbound traffic at arbitrary "
        f"times expect up to +{step:g} s. {socket_tier}/{detect.n} recovered on the socket "
        f"tier afterwards. Reference client: "
        f"Engine.IO's ping timeout, up to {REF_PING_TIMEOUT:g} s "
        f"({REF_PING_TIMEOUT / detect.median:.0f}x this median).",
    ]
    data = {
        "target": SILENT_TARGET.as_json(),
        "socket_probe_interval_s": config.socket_probe_interval,
        "socket_probe_timeout_s": config.socket_probe_timeout,
        "detect": detect.scaled(1000.0).as_json("ms"),
        "last_inbound_to_detect": since.scaled(1000.0).as_json("ms"),
        "quiet_at_fault": quiet.scaled(1000.0).as_json("ms"),
        "reconnected": back.scaled(1000.0).as_json("ms"),
        "socket_tier_recoveries": socket_tier,
        "pass": {"median": SILENT_TARGET.met(detect.median), "p90": SILENT_TARGET.met(detect.p90)},
        "ratios": {
            "detect_vs_design_bound": ratio(since.median, bound),
            "reference_ping_timeout_vs_detect": ratio(REF_PING_TIMEOUT, detect.median),
        },
    }
    return rows, notes, data


#: Per-round yes/no marks kept among the samples (1.0 = yes): reported as is, not in ms.
FLAGS = frozenset({"gate_capped", "socket_tier"})


def _samples_ms(part: Part) -> dict[str, list[float]]:
    return {
        metric: part.values(metric) if metric in FLAGS else [ms(v) for v in part.values(metric)]
        for metric in part.samples[0]
    }


def _run() -> FigureResult:
    result = FigureResult("resilience", TITLE)
    parts, info = asyncio.run(_measure())
    config = SessionConfig()
    built = {
        "asr": _asr(parts["asr"]),
        "stv": _stv(parts["stv"]),
        "cold": _cold(parts["cold"]),
        "stall": _stall(parts["stall"], config.media_stall_timeout),
        "silent": _silent(parts["silent"], config),
    }
    for rows, _, _ in built.values():
        result.rows.extend(rows)
    result.notes = [
        f"One A/V session, default SessionConfig, staging server in this process and loop; "
        f"{STEADY:g} s of steady media (plus a random 0-{MEDIA_TICK:g} s, "
        f"0-{SOCKET_TICK:g} s for the socket part, so faults do not phase-lock to the "
        f"watchdog ticks) before every round; rounds: "
        + ", ".join(
            f"{key} {len(part.samples)} ({part.seconds:.0f} s)" for key, part in parts.items()
        )
        + ". Socket tier (transport closes): figure 2 (recovery.py), not repeated here.",
    ]
    for _, notes, _ in built.values():
        result.notes.extend(notes)
    fallbacks = [f for part in parts.values() for f in part.fallbacks]
    stopped = [
        f"{key}: {part.stopped}"
        for key, part in parts.items()
        if len(part.samples) < part.plan.rounds
    ]
    unprovoked = info["unprovoked_recoveries"]
    result.notes.append(
        f"{len(fallbacks)} round(s) fell back to another tier"
        + (f" ({'; '.join(fallbacks[:3])})" if fallbacks else "")
        + f"; {len(unprovoked)} recovery(ies) started during the steady seconds with no fault"
        + (f" ({'; '.join(unprovoked[:3])})" if unprovoked else "")
        + (f"; stopped early: {'; '.join(stopped)}" if stopped else "")
        + f". SDK reconnects: {info['sdk_reconnects']}; server: {info['server_recoveries']} "
        f"socket recoveries, {info['server_refused_recoveries']} refused."
    )
    result.data = {
        "steady_s": STEADY,
        "floor_ms": {
            "first_rtp": FLOOR_FIRST_RTP_MS,
            "first_frame": FLOOR_FIRST_FRAME_MS,
            "ice_restart": list(FLOOR_ICE_RESTART_MS),
        },
        "reference_delays_s": {
            "ice_disconnected_grace": REF_ICE_GRACE,
            "stuck_watchdog": REF_STUCK_WATCHDOG,
            "reconnect_window": REF_RECONNECT_WINDOW,
            "asr_answer_wait": REF_ASR_WAIT,
            "engineio_ping_timeout_max": REF_PING_TIMEOUT,
        },
        "socket_tier": "see figure 'recovery' (recovery.py)",
        **{key: data for key, (_, _, data) in built.items()},
        "rounds": {
            key: {
                "counted": len(part.samples),
                "warmup": part.plan.warmup,
                "planned": part.plan.rounds,
                "seconds": part.seconds,
                "stopped": part.stopped,
                "fallbacks": part.fallbacks,
                "samples_ms": _samples_ms(part),
            }
            for key, part in parts.items()
        },
        **info,
    }
    return result


def run() -> FigureResult:
    """Run figure 5 in its own event loop."""
    return _run()


def run_asr() -> FigureResult:
    """Only the ASR uplink part of figure 5 (``python -m benchmarks --only asr``)."""
    result = FigureResult("asr", ASR_TITLE)
    parts, info = asyncio.run(_measure(("asr",)))
    part = parts["asr"]
    rows, notes, data = _asr(part)
    result.rows.extend(rows)
    unprovoked = info["unprovoked_recoveries"]
    result.notes = [
        f"One A/V session, default SessionConfig, staging server in this process and loop; "
        f"{len(part.samples)} rounds ({part.seconds:.0f} s), each after {STEADY:g} s of "
        f"steady media; the same rounds as figure 'resilience' (part ASR).",
        *notes,
        f"{len(part.fallbacks)} round(s) fell back to another tier; {len(unprovoked)} "
        f"recovery(ies) started during the steady seconds with no fault"
        + (f" ({'; '.join(unprovoked[:3])})" if unprovoked else "")
        + ".",
    ]
    result.data = {
        **data,
        "samples_ms": _samples_ms(part),
        "fallbacks": part.fallbacks,
        "unprovoked_recoveries": unprovoked,
    }
    return result
