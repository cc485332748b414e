"""Figure: the SDK across a real, faulty network (the network lab, root).

Each scenario (:mod:`.netlab_scenarios`) is one audio+video session against the staging
backend in the lab's other namespace, a turn a second, and one kernel-level fault: UDP
loss both ways, blackholes, a TCP reset, a link flap, an address change, a downlink rate
limit. Rows: per scenario, the detection time (fault start -> first ``network_changed``,
``media_recovering`` or ``reconnecting``) and the recovery time (fault end -> connected
with video arriving), seconds; the notes give the tiers, turns answered of sent, frames
and the false-alarm rate of the uplink's receiver-report rule at each loss rate
(:mod:`.report_alarms`). Without root or the lab's tools the figure is not measured and
says why.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict

from avatar_sdk.testing.netlab import requirements

from . import netlab_scenarios as lab
from . import report_alarms
from .stats import FigureResult, Row, Target

TITLE = "network lab: detection and recovery across kernel-level faults"

SCENARIOS = (
    ("loss 5% 20s", lab.loss(5, 20.0), False),
    ("loss 20% 20s", lab.loss(20, 20.0), False),
    ("blackhole all 3s", lab.blackhole(3.0), True),
    ("blackhole all 10s", lab.blackhole(10.0), True),
    ("blackhole udp 10s", lab.blackhole(10.0, "udp"), True),
    ("reject tcp 1s", lab.reject("tcp", 1.0), True),
    ("flap 2s", lab.flap(2.0), True),
    ("address change", lab.address_change(), True),
    ("rate 300 kbit/s down 10s", lab.rate_limit(300, 10.0), False),
    ("rate 50 kbit/s down 10s", lab.rate_limit(50, 10.0), False),
)


def run() -> FigureResult:
    result = FigureResult("netlab", TITLE)
    problem = requirements()
    if problem is not None:
        result.error = problem
        return result
    measured = []
    for name, fault, recovers in SCENARIOS:
        figures = asyncio.run(lab.run_scenario(name, fault, expect_recovery=recovers))
        measured.append(asdict(figures))
        if figures.detection is not None:
            # A lost path is found within the media's 2 s bounds; a rate limit is no lost
            # path (what notices it, if anything, is the figure).
            target = None if name.startswith("rate") else Target("<", 3.0, "s")
            result.rows.append(Row(f"{name}: detection", 1, figures.detection, "s", target=target))
        if figures.recovery is not None:
            result.rows.append(Row(f"{name}: recovery", 1, figures.recovery, "s"))
        tiers = ", ".join(figures.tiers) or "none"
        extra = f", downlink {figures.downlink_kbit:.0f} kbit/s" if figures.downlink_kbit else ""
        if name.startswith("loss"):  # the voice's receive buffer conceals what was lost
            extra += (
                f"; voice {figures.voice_concealed} frames concealed, {figures.voice_late} "
                f"late, of {figures.voice_packets} packets"
            )
        result.notes.append(
            f"{name}: tiers {tiers}; turns {figures.turns_answered}/{figures.turns_sent} "
            f"answered, {figures.turns_duplicated} duplicated, {figures.turns_resent} resent; "
            f"video {figures.video_frames} frames ({_fps(figures.video_fps_before)} fps "
            f"before, {_fps(figures.video_fps_during)} during){extra}; "
            f"state {figures.final_state}"
        )
    alarms = report_alarms.table(minutes=5_000)
    result.notes.append(
        "uplink receiver-report rule, false alarms per minute under independent loss "
        "(simulated, aiortc's 0.5-1.5 s reports): "
        + ", ".join(f"{a.loss:.0%}: {a.per_minute:.1e}" for a in alarms if a.cadence == "aiortc")
    )
    result.data = {
        "scenarios": measured,
        "report_false_alarms_per_minute": [asdict(a) for a in alarms],
    }
    return result


def _fps(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"
