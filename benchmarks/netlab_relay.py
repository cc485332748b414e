"""Figure: media through a real TURN relay (the network lab, root).

Each run (:mod:`.netlab_relay_scenario`) is one audio+video session against the staging
backend in the lab's other namespace, on one path: ``direct`` (the baseline), ``relay-udp``
(all UDP but coturn's port dropped) or ``relay-tcp`` (all UDP dropped, TCP to coturn). A
turn, then a control-socket drop and an ICE failure of each media channel. Rows: per path,
the connect time, the first media both ways, and per fault the time to the session's
recovered event and to media flowing both ways again, seconds (median of ``RUNS``).
Without root or the lab's tools the figure is not measured and says why.
"""

from __future__ import annotations

import asyncio
import statistics
from dataclasses import asdict

from avatar_sdk.testing.netlab import requirements

from .netlab_relay_scenario import FAULTS, Path, RelayFigures, run_relay
from .stats import FigureResult, Row

TITLE = "network lab: connect and recovery through a TURN relay (coturn) vs direct"
PATHS: tuple[Path, ...] = ("direct", "relay-udp", "relay-tcp")
RUNS = 3


def run() -> FigureResult:
    result = FigureResult("netlab_relay", TITLE)
    problem = requirements()
    if problem is not None:
        result.error = problem
        return result
    measured: dict[str, list[RelayFigures]] = {}
    for path in PATHS:
        runs = measured[path] = [asyncio.run(run_relay(path)) for _ in range(RUNS)]
        good = [f for f in runs if f.error is None]
        _row(result, f"{path}: connect", [f.connect for f in good])
        _row(result, f"{path}: first media", [f.first_media for f in good])
        for name, *_ in FAULTS:
            _row(result, f"{path}: {name} recovered", [f.recovery.get(name) for f in good])
            _row(result, f"{path}: {name} media again", [f.media.get(name) for f in good])
        result.notes.append(
            f"{path}: {len(good)}/{len(runs)} runs passed; allocations "
            f"{[f.allocations for f in runs]}; errors {[f.error for f in runs if f.error]}"
        )
    result.data = {path: [asdict(f) for f in runs] for path, runs in measured.items()}
    return result


def _row(result: FigureResult, label: str, values: list[float | None]) -> None:
    known = [v for v in values if v is not None]
    if known:
        result.rows.append(
            Row(label, len(known), statistics.median(known), "s", maximum=max(known))
        )
