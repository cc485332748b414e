"""The uplink's receiver-report rule under random loss: its false-alarm rate per minute.

A healthy uplink's server sends RTCP receiver reports at randomised intervals (aiortc:
uniform over 0.5-1.5 s; a libwebrtc-like media server: 2.5-7.5 s); each report is one UDP
datagram, lost independently with probability ``p`` (the assumption: independent loss,
what the network lab's ``numgen random`` rule does; real loss is often burstier, which
makes runs of lost reports, and so false alarms, more likely than this). The rule is
:class:`avatar_sdk.transport.liveness.cadence.ReportCadence` itself, with the product's floor
(``media_stall_timeout`` = 2 s): a false alarm is a gap between two received reports
longer than the deadline the rule had set at the first of them. The simulation starts
with the rule warmed up (a window of gaps seen) and goes on after an alarm (the recovery
keeps the gaps), counting every alarm.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from avatar_sdk.transport.liveness.cadence import ReportCadence

FLOOR = 2.0
CADENCES = {"aiortc": (0.5, 1.5), "libwebrtc": (2.5, 7.5)}


@dataclass(frozen=True)
class AlarmRate:
    loss: float
    cadence: str
    per_minute: float  # expected false alarms per minute

    @property
    def probability_per_minute(self) -> float:
        """P(at least one false alarm in a minute), alarms taken as a Poisson process."""
        return 1.0 - math.exp(-self.per_minute)


def false_alarms(loss: float, cadence: str, minutes: float, seed: int = 1) -> AlarmRate:
    low, high = CADENCES[cadence]
    rng = random.Random(seed)
    now = 0.0
    rule = ReportCadence(FLOOR, clock=lambda: now)
    rule.start(0.0)
    alarms = 0
    end = minutes * 60.0
    warm = 0
    while now < end:
        now += rng.uniform(low, high)
        if rng.random() < loss:
            continue  # this report is lost
        if warm < 9:  # the window full of gaps before anything is judged
            rule.observe(now)
            warm += 1
            continue
        deadline = rule.deadline()
        last = rule.last_report
        if deadline is not None and last is not None and now - last > deadline:
            alarms += 1
        rule.observe(now)
    return AlarmRate(loss, cadence, alarms / minutes)


def table(
    losses: tuple[float, ...] = (0.01, 0.05, 0.10, 0.20), minutes: float = 20_000
) -> list[AlarmRate]:
    return [false_alarms(p, c, minutes) for c in CADENCES for p in losses]


if __name__ == "__main__":
    for rate in table():
        print(
            f"{rate.cadence:10} loss {rate.loss:4.0%}: {rate.per_minute:.2e} alarms/min, "
            f"P(>=1 per minute) {rate.probability_per_minute:.2e}"
        )
