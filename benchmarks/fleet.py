"""Figure ``fleet``: the fleet runner's own CPU overhead per session.

The same work (N control-only sessions, each: connect, greeting, one text turn, close, on a
ramp of ``rate`` sessions per second) measured three ways against one staging server in
its own child process (:mod:`.fleet_runs` has how each way is run and measured):

1. hand-written ``AvatarSession`` tasks in one process: the floor;
2. ``run_fleet(engine="inline")`` in one process, scenario one ``ctx.turn``: CPU
   comparable with (1), so (2) - (1) is the runner's overhead (instrumentation,
   measurements, ``FleetStats``, JSON Lines);
3. ``run_fleet(engine="local", workers=1)``: a worker process plus the driver, each's CPU
   apart; (3) - (1) adds the pipe (pickling batches of measurements) and the driver's
   aggregation.

CPU per session is the marginal ``(CPU(N) - CPU(1)) / (N - 1)`` of a fresh ``spawn`` child
per (way, round), after a one-session warm-up. Reply latency (speak -> ``agent_turn_ended``)
and the counts answered are reported per way: the overhead is only meaningful if the three
did the same work. A figure of its own rather than part (c) of ``load``: it measures the
runner rather than the SDK, has its own ``--only fleet``, and ``load.py`` is full.
``BENCH_LOAD_QUICK=1`` (``load``'s switch) runs a short version (N=20, one round).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .fleet_runs import WAYS, RunArgs, measure_in_child
from .harness import describe_error
from .load import QUICK_ENV, ratio_of
from .load_cpu import run_child
from .media import ChildServer
from .stats import FigureResult, Row, Summary, Target

TITLE = "fleet: the runner's own CPU overhead per session (hand-written vs run_fleet)"

#: Label of each way in the table.
LABELS: dict[str, str] = {
    "hand": "hand-written AvatarSessions",
    "inline": "run_fleet inline",
    "local": "run_fleet local, 1 worker",
}
#: CPU parts of a record: both together, this process alone (the driver), its children.
PARTS = ("total", "driver", "worker")


@dataclass(frozen=True)
class Plan:
    """Sizes of one run of the figure."""

    sessions: int = 200
    rate: float = 50.0  # sessions started per second, every way
    #: Rounds of the three ways, in ABC CBA order (drift weighs on all alike): the mean.
    rounds: int = 2
    turn_timeout: float = 15.0


FULL = Plan()
QUICK = Plan(sessions=20, rate=20.0, rounds=1)


def current_plan() -> Plan:
    """:data:`QUICK` when ``BENCH_LOAD_QUICK`` is set to anything but 0, else :data:`FULL`."""
    return QUICK if os.environ.get(QUICK_ENV, "0") not in ("", "0") else FULL


def probe_order(ways: Sequence[str], rounds: int) -> list[tuple[str, int]]:
    """(way, round): the ways in order, then reversed, and so on."""
    return [(w, r) for r in range(rounds) for w in (ways if r % 2 == 0 else ways[::-1])]


# --------------------------------------------------------------------------- pure


def _cpu(run: dict[str, Any], part: str) -> float:
    if part == "driver":
        return float(run["cpu_s"])
    if part == "worker":
        return float(run["children_cpu_s"])
    return float(run["cpu_s"]) + float(run["children_cpu_s"])


def marginal_ms(record: dict[str, Any], part: str = "total") -> float | None:
    """ms of CPU per session: ``(CPU(N) - CPU(baseline)) / (N - baseline's sessions)``."""
    if "error" in record:
        return None
    run, base = record["run"], record["baseline"]
    extra = int(run["sessions"]) - int(base["sessions"])
    if extra <= 0:
        return None
    return 1000.0 * (_cpu(run, part) - _cpu(base, part)) / extra


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


@dataclass(frozen=True)
class WayCpu:
    """One way's records, one per round (failed ones included, with their error)."""

    way: str
    records: list[dict[str, Any]]

    @property
    def good(self) -> list[dict[str, Any]]:
        return [r for r in self.records if "error" not in r]

    def ms(self, part: str = "total") -> float | None:
        """Mean marginal ms of CPU per session over the rounds that measured."""
        return _mean([marginal_ms(r, part) for r in self.good])

    @property
    def ended_s(self) -> list[float]:
        """Every answered turn's latency of the N-session runs, pooled over rounds."""
        return [float(x) for r in self.good for x in r["run"]["ended_s"]]

    @property
    def sent(self) -> int:
        return sum(int(r["run"]["sessions"]) for r in self.good)

    @property
    def answered(self) -> int:
        return sum(int(r["run"]["ok"]) for r in self.good)


def by_way(records: Sequence[dict[str, Any]], ways: Sequence[str] = tuple(LABELS)) -> list[WayCpu]:
    return [WayCpu(w, [r for r in records if r["way"] == w]) for w in ways]


def overhead(way: WayCpu, hand: WayCpu) -> tuple[float | None, float | None]:
    """The runner's overhead per session: ms of CPU over the hand-written way's, and %."""
    mine, floor = way.ms(), hand.ms()
    if mine is None or floor is None:
        return None, None
    ratio = ratio_of(mine - floor, floor)
    return mine - floor, None if ratio is None else 100.0 * ratio


def _nan(value: float | None) -> float:
    return float("nan") if value is None else value


def cpu_rows(items: Sequence[WayCpu]) -> list[Row]:
    ways = {item.way: item for item in items}
    hand = ways["hand"]
    rows: list[Row] = []
    for item in items:
        label, n = LABELS[item.way], item.sent
        what = "CPU/session" + (" (worker + driver)" if item.way == "local" else "")
        rows.append(Row(f"{what}, {label}", n, _nan(item.ms()), "ms CPU"))
        if item.way == "local":
            worker, driver = item.ms("worker"), item.ms("driver")
            share = ratio_of(driver, item.ms())
            rows.append(Row("  worker process's CPU/session", n, _nan(worker), "ms CPU"))
            rows.append(Row("  driver's CPU/session", n, _nan(driver), "ms CPU"))
            rows.append(
                Row("  driver's share", n, _nan(None if share is None else 100.0 * share), "%")
            )
        if item.way != "hand":
            extra, pct = overhead(item, hand)
            rows.append(Row(f"  runner overhead/session, {item.way}", n, _nan(extra), "ms CPU"))
            rows.append(Row(f"  runner overhead, {item.way}, of hand-written", n, _nan(pct), "%"))
    return rows


def latency_rows(items: Sequence[WayCpu]) -> list[Row]:
    rows: list[Row] = []
    for item in items:
        label = LABELS[item.way]
        if item.ended_s:
            s = Summary.of(item.ended_s).scaled(1000.0)
            rows.append(
                Row(f"speak -> agent_turn_ended, {label}", s.n, s.median, "ms", s.p90, s.maximum)
            )
        target = Target(">=", float(item.sent), "sessions") if item.sent else None
        rows.append(
            Row(f"sessions answered, {label}", item.sent, float(item.answered), "sessions", None,
                None, target)
        )  # fmt: skip
    return rows


def _round_note(record: dict[str, Any]) -> str:
    head = f"{record['way']} round {record.get('round', 0)}"
    if "error" in record:
        return f"{head}: ERROR {record['error']}"
    run, base = record["run"], record["baseline"]
    marginal = ", ".join(
        f"{part} {_nan(marginal_ms(record, part)):.2f}"
        for part in (PARTS if record["way"] == "local" else PARTS[:1])
    )
    parts = [
        f"marginal ms CPU/session {marginal}",
        f"{1000.0 * _cpu(run, 'total') / run['sessions']:.2f} ms CPU/session with fixed costs "
        f"({run['sessions']} sessions in {run['wall_s']:.1f} s; baseline 1 session "
        f"{1000.0 * _cpu(base, 'total'):.0f} ms)",
        f"{run['ok']}/{run['sessions']} ok",
        f"server {100.0 * run['server_cpu_s'] / run['wall_s']:.0f}% of a core",
        f"other processes {100.0 * run['other_processes_cores']:.0f}% of a core",
        f"server conversations left {run['server_left']}",
    ]
    if record["way"] != "hand":
        parts.append(f"{run.get('jsonl_lines')} JSON lines")
    if run.get("errors"):
        parts.append(f"errors {run['errors']}")
    return f"{head}: " + "; ".join(parts) + "."


def render(measured: dict[str, Any], plan: Plan) -> FigureResult:
    """The figure from raw measurements (pure: no I/O)."""
    result = FigureResult("fleet", TITLE)
    items = by_way(measured["records"])
    result.rows = cpu_rows(items) + latency_rows(items)
    load = measured.get("loadavg") or []
    result.notes = [
        f"The same work three ways: N={plan.sessions} control-only sessions started at "
        f"{plan.rate:g}/s, each connect, greeting, one text turn, close; staging server in its "
        f"own process. CPU per session = (CPU of the N-session run - CPU of a 1-session "
        f"baseline) / (N - 1), in a fresh spawn child per way and round after a 1-session "
        f"warm-up, mean of {plan.rounds} round(s) in ABC CBA order. Hand-written: "
        f"process_time; inline: process_time (JSON Lines written); local: the worker's "
        f"getrusage(RUSAGE_CHILDREN) once joined plus the driver's process_time.",
        *(_round_note(r) for r in measured["records"]),
    ]
    if load:
        result.notes.append(
            "Machine load average (1 min) before/after: "
            + " / ".join(f"{v:.2f}" for v in load)
            + f" on {os.cpu_count()} CPUs."
        )
    result.data = {
        "plan": {"sessions": plan.sessions, "rate": plan.rate, "rounds": plan.rounds},
        "loadavg_1min": load,
        "ways": [
            {
                "way": item.way,
                "label": LABELS[item.way],
                **{f"{part}_ms_per_session": item.ms(part) for part in PARTS},
                "overhead_ms_per_session": overhead(item, items[0])[0],
                "overhead_pct": overhead(item, items[0])[1],
                "sent": item.sent,
                "answered": item.answered,
                "ended_ms": Summary.of(item.ended_s).scaled(1000.0).as_json("ms")
                if item.ended_s
                else None,
                "records": item.records,
            }
            for item in items
        ],
    }
    return result


# --------------------------------------------------------------------------- measuring


async def _measure(plan: Plan) -> dict[str, Any]:
    loads = [os.getloadavg()[0]]
    records: list[dict[str, Any]] = []
    timeout = 120.0 + 3.0 * plan.sessions / plan.rate
    async with ChildServer() as server:
        for way, index in probe_order(WAYS, plan.rounds):
            args = RunArgs(
                server.url, server.token, way, plan.sessions, plan.rate, plan.turn_timeout
            )
            try:
                # local's driver starts a worker process: a daemon may not have children
                record = await run_child(measure_in_child, (args,), timeout, daemon=way != "local")
            except Exception as exc:
                record = {"way": way, "error": describe_error(exc)}
            records.append({**record, "round": index})
            await server.wait_idle()
    loads.append(os.getloadavg()[0])
    return {"records": records, "loadavg": loads}


def run(plan: Plan | None = None) -> FigureResult:
    """Run the figure (``BENCH_LOAD_QUICK=1``: the quick plan)."""
    chosen = plan or current_plan()
    result = render(asyncio.run(_measure(chosen)), chosen)
    if chosen is QUICK:
        result.notes.insert(0, f"QUICK run ({QUICK_ENV}=1): N={QUICK.sessions}, one round.")
    return result
