"""Figure 5b: the uplink's liveness, from a silent uplink death to audio on a new uplink.

The death is server-side and silent: ``faults.ice_failure("asr", mode="blackhole")`` drops
every datagram of the server's ICE path both ways (STUN included) while its peer stays up,
as when a media server's socket vanishes without a goodbye. aiortc alone keeps such a
peer "connected" for ~30 s (consent checks every 5 s, 6 misses), which is what the SDK took
before its first receiver report on a peer (issue 17). Measured from a ``time.monotonic()``
just before the fault call to:

* ``media_recovering`` (detected), ``media_recovered`` (new peer connected, RTP sent);
* audio flowing: the first decoded frame on the new server peer
  (``AsrStats.peer_first_frame_at``, stamped by the staging server as it decodes it).

Three situations, each with its own staging server reporting every 4.5 s (``StagingServer(
asr_report_interval=4.5)``: a libwebrtc-like media server; RFC 3550 lets the first report
come a whole interval after connect), default ``SessionConfig``:

* ``first_report``: the uplink dies right after ``connect()`` returns, before any receiver
  report reached the session (checked; a round where one did is not counted). A new
  session per round.
* ``after_recovery``: the uplink is failed (``ice_failure("asr")``, closed), and the peer
  the recovery builds dies silently the moment ``media_recovered`` is emitted.
* ``slow_reports``: the peer has had two reports (the report rule has a verdict), then dies.

And the other half: a healthy uplink is watched with reports every 4.5 s (the waits of
``slow_reports``) and with no report at all (``healthy_never``): every ``media_recovering``
there is spurious. Target: death -> audio flowing under 5 s in every situation; 0 spurious.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from typing import Any

from avatar_sdk import AvatarSession
from avatar_sdk.testing import StagingServer

from .harness import wait_state
from .resilience import Fallback, Timeline, media_session
from .stats import FigureResult, Row, Summary, Target

TITLE = "uplink liveness: silent uplink death -> audio on a new uplink"
TARGET = Target("<", 5.0, "s")
SLOW = 4.5
ROUNDS = {"first_report": 6, "after_recovery": 6, "slow_reports": 4}
HEALTHY_NEVER = 20.0  # seconds a healthy peer of a never-reporting server is watched
ROUND_TIMEOUT = 40.0  # past aiortc's own ~30 s consent expiry: an old-style detection shows
CONNECT_TIMEOUT = 20.0
REF_AIORTC_CONSENT = 30.0  # aioice: consent every ~5 s, 6 misses
LABELS = {
    "first_report": "before 1st report",
    "after_recovery": "after a recovery",
    "slow_reports": "4.5 s reports",
}


@dataclass
class Scenario:
    key: str
    samples: list[dict[str, float]] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    fallbacks: list[str] = field(default_factory=list)

    def summary(self, metric: str) -> Summary:
        return Summary.of([s[metric] for s in self.samples])


@dataclass
class Healthy:
    seconds_reports: float = 0.0
    seconds_never: float = 0.0
    spurious: list[str] = field(default_factory=list)
    consent_answers_never: int = 0


async def _kill_and_time(
    staging: StagingServer, session: AvatarSession, timeline: Timeline
) -> tuple[dict[str, float], str]:
    sid = staging.live_sids[0]
    peers = staging.media.asr_stats(sid).peers_created
    mark = timeline.mark()
    started = time.monotonic()
    if await staging.faults.ice_failure("asr", mode="blackhole") != 1:
        raise Fallback("no uplink peer to kill")
    detected = await timeline.wait(
        mark, "media_recovering", ROUND_TIMEOUT, abort="reconnecting", channel="asr"
    )
    recovered = await timeline.wait(
        mark, "media_recovered", ROUND_TIMEOUT, abort="reconnecting", channel="asr"
    )
    deadline = started + ROUND_TIMEOUT
    while True:
        stats = staging.media.asr_stats(sid)
        first = stats.peer_first_frame_at
        if stats.peers_created > peers and first is not None and first > started:
            break
        if time.monotonic() > deadline:
            raise TimeoutError("no audio on a new uplink")
        await asyncio.sleep(0.01)  # the stamp is the server's own, not this poll's
    return (
        {
            "detect": detected.at - started,
            "recovered": recovered.at - started,
            "flowing": first - started,
        },
        str(detected.data.get("reason", "")),
    )


async def _first_report(healthy: Healthy) -> Scenario:
    scenario = Scenario("first_report")
    async with StagingServer(asr_report_interval=SLOW) as staging:
        for _ in range(ROUNDS[scenario.key]):
            session = media_session(staging)
            timeline = Timeline(session)
            try:
                await asyncio.wait_for(session.connect(), CONNECT_TIMEOUT)
                lanes = session.media
                assert lanes is not None
                await lanes.poll_asr_reports()
                if lanes.asr_reports:
                    scenario.fallbacks.append("a report arrived before the fault")
                    continue
                sample, reason = await _kill_and_time(staging, session, timeline)
                await lanes.poll_asr_reports()
                if lanes.asr_reports:
                    scenario.fallbacks.append("a report arrived around the fault")
                    continue
                scenario.samples.append(sample)
                scenario.reasons.append(reason)
            except Fallback as fallback:
                scenario.fallbacks.append(str(fallback))
            finally:
                await session.close()
    return scenario


async def _after_recovery(healthy: Healthy) -> Scenario:
    scenario = Scenario("after_recovery")
    async with StagingServer(asr_report_interval=SLOW) as staging:
        session = media_session(staging)
        timeline = Timeline(session)
        try:
            await asyncio.wait_for(session.connect(), CONNECT_TIMEOUT)
            for _ in range(ROUNDS[scenario.key]):
                await wait_state(session, "connected", ROUND_TIMEOUT)
                await asyncio.sleep(1.0)  # steady media before the first fault
                mark = timeline.mark()
                await staging.faults.ice_failure("asr")  # closed: recovered at once
                try:
                    await timeline.wait(
                        mark, "media_recovered", ROUND_TIMEOUT, abort="reconnecting"
                    )
                    sample, reason = await _kill_and_time(staging, session, timeline)
                except Fallback as fallback:
                    scenario.fallbacks.append(str(fallback))
                    continue
                scenario.samples.append(sample)
                scenario.reasons.append(reason)
        finally:
            await session.close()
    return scenario


async def _slow_reports(healthy: Healthy) -> Scenario:
    scenario = Scenario("slow_reports")
    async with StagingServer(asr_report_interval=SLOW) as staging:
        session = media_session(staging)
        timeline = Timeline(session)
        try:
            await asyncio.wait_for(session.connect(), CONNECT_TIMEOUT)
            for _ in range(ROUNDS[scenario.key]):
                await wait_state(session, "connected", ROUND_TIMEOUT)
                lanes = session.media
                assert lanes is not None
                mark = timeline.mark()
                watched = time.monotonic()
                while lanes.asr_cadence.reports < 2:
                    if time.monotonic() - watched > 5 * SLOW:
                        raise TimeoutError("no two receiver reports in 22.5 s")
                    await asyncio.sleep(0.05)
                healthy.seconds_reports += time.monotonic() - watched
                healthy.spurious += [
                    str(s.data.get("reason")) for s in timeline.since(mark, "media_recovering")
                ]
                try:
                    sample, reason = await _kill_and_time(staging, session, timeline)
                except Fallback as fallback:
                    scenario.fallbacks.append(str(fallback))
                    continue
                scenario.samples.append(sample)
                scenario.reasons.append(reason)
        finally:
            await session.close()
    return scenario


async def _healthy_never(healthy: Healthy) -> None:
    async with StagingServer(asr_report_interval=math.inf) as staging:
        session = media_session(staging)
        timeline = Timeline(session)
        try:
            await asyncio.wait_for(session.connect(), CONNECT_TIMEOUT)
            mark = timeline.mark()
            started = time.monotonic()
            await asyncio.sleep(HEALTHY_NEVER)  # the measurement is this span of time
            healthy.seconds_never = time.monotonic() - started
            healthy.spurious += [
                str(s.data.get("reason")) for s in timeline.since(mark, "media_recovering")
            ]
            lanes = session.media
            if lanes is not None and lanes.asr is not None:
                healthy.consent_answers_never = lanes.asr.consent.answers
                await lanes.poll_asr_reports()
                if lanes.asr_reports:
                    raise RuntimeError("a never-reporting server reported")
        finally:
            await session.close()


async def _measure() -> tuple[list[Scenario], Healthy]:
    healthy = Healthy()
    scenarios = [
        await _first_report(healthy),
        await _after_recovery(healthy),
        await _slow_reports(healthy),
    ]
    await _healthy_never(healthy)
    return scenarios, healthy


def _row(label: str, summary: Summary, target: Target | None = None) -> Row:
    return Row(label, summary.n, summary.median, "s", summary.p90, summary.maximum, target)


def run() -> FigureResult:
    """Run figure 5b in its own event loop."""
    result = FigureResult("uplink", TITLE)
    scenarios, healthy = asyncio.run(_measure())
    data: dict[str, Any] = {"target": TARGET.as_json(), "report_interval_s": SLOW}
    for scenario in scenarios:
        if not scenario.samples:
            raise RuntimeError(f"{scenario.key}: no round counted: {scenario.fallbacks[:3]}")
        label = LABELS[scenario.key]
        flowing = scenario.summary("flowing")
        detect = scenario.summary("detect")
        result.rows += [
            _row(f"uplink death, {label}: detected", detect),
            _row(f"uplink death, {label}: audio on new", flowing, TARGET),
        ]
        by_consent = sum("consent" in r for r in scenario.reasons)
        result.notes.append(
            f"uplink death {label}: death -> audio on a new uplink median {flowing.median:.2f} s "
            f"(p90 {flowing.p90:.2f}, max {flowing.maximum:.2f}), target {TARGET.label()}: "
            f"{TARGET.verdict(flowing.median)}; detected by ICE consent in {by_consent}/"
            f"{len(scenario.reasons)} rounds; {len(scenario.fallbacks)} not counted"
            + (f" ({'; '.join(scenario.fallbacks[:2])})" if scenario.fallbacks else "")
            + f". aiortc alone: ~{REF_AIORTC_CONSENT:g} s."
        )
        data[scenario.key] = {
            "detect": detect.scaled(1000.0).as_json("ms"),
            "recovered": scenario.summary("recovered").scaled(1000.0).as_json("ms"),
            "flowing": flowing.scaled(1000.0).as_json("ms"),
            "pass": {"median": TARGET.met(flowing.median), "max": TARGET.met(flowing.maximum)},
            "detected_by_consent": by_consent,
            "fallbacks": scenario.fallbacks,
            "samples_ms": {
                metric: [s[metric] * 1000.0 for s in scenario.samples]
                for metric in ("detect", "recovered", "flowing")
            },
        }
    result.notes.append(
        f"healthy uplink: watched {healthy.seconds_reports:.0f} s with reports every "
        f"{SLOW:g} s and {healthy.seconds_never:.0f} s with no report at all "
        f"({healthy.consent_answers_never} consent answers): "
        f"{len(healthy.spurious)} spurious recovery(ies)"
        + (f" ({'; '.join(healthy.spurious[:3])})" if healthy.spurious else "")
        + "."
    )
    data["healthy"] = {
        "seconds_reporting_every_4_5_s": healthy.seconds_reports,
        "seconds_never_reporting": healthy.seconds_never,
        "consent_answers_never_reporting": healthy.consent_answers_never,
        "spurious_recoveries": healthy.spurious,
    }
    result.data = data
    return result
