"""Figure ``load``: CPU per session per mode (SDK beside bare aiortc), sessions per process.

(a) :mod:`.load_cpu`: for every mode of :data:`~.load_cpu.MODES` (control-only, audio-only
    with a PCM tone uplink, the same with ``audio_codec="loop"``, audio-only with a
    pre-encoded uplink, audio+video), K sessions in a fresh child process, % of one core
    per session over a steady window; then the same for a bare client doing the same
    work (:mod:`.bare`); the ratio SDK/bare is what the SDK adds (the on-loop mode's bare
    client is audio_pcm's: bare aiortc has no such option). Issue 11's targets (audio-only
    <= 4% encoded, <= 7% PCM, on-loop or not) are information.
(b) :mod:`.load_turns`: control-only sessions in one child process at rising levels, one
    text turn each spread over a few seconds: reply latency per level, every session
    answered, p90 against the single session's (target: 1,000 sessions, p90 < 2x).

The staging server runs in its own child process for both parts (its CPU is recorded: it
tells whether the server or the client saturated). ``BENCH_LOAD_QUICK=1`` runs a short
version (K=2, 2 s windows, levels 1 and 50) for development.
"""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .load_cpu import LAG_WINDOW, MODES, Mode, probes, run_child
from .load_turns import TurnPlan, plan_dict, ramp_in_child, saturation
from .media import ChildServer
from .stats import FigureResult, Row, Target

TITLE = "load: CPU per session per mode (SDK vs bare aiortc), sessions per process"

#: Part (b)'s target: p90 reply latency within this factor of the single session's.
P90_LIMIT = 2.0
#: Part (b)'s staging server: ``StagingServer`` keyword arguments. Its defaults (event
#: spacing 2 ms, speech_time_scale 0.25) held 1,000 sessions at about a third of a core, so
#: nothing is tuned; set e.g. ``{"event_spacing": 0.0}`` here if a level saturates it.
TURN_SERVER_OPTIONS: dict[str, Any] = {}
QUICK_ENV = "BENCH_LOAD_QUICK"
#: Below this share of a core per session (%) the bare client is idle and an SDK/bare ratio
#: says nothing (control-only: 0.10% against 0.00% reads as 63x); the points the SDK adds
#: are in the mode's note either way.
MIN_RATIO_BASE = 0.05


@dataclass(frozen=True)
class Plan:
    """Sizes of one run of the figure."""

    sessions: int = 4  # K per CPU probe
    settle: float = 1.0
    window: float = 6.0
    #: Probes per (mode, client), in ABBA order (SDK, bare, bare, SDK...): the mean is used.
    rounds: int = 2
    turns: TurnPlan = field(default_factory=TurnPlan)
    #: Part (b) again with the session graphs frozen once connected (``gc.freeze()``,
    #: ``docs/fleet.md``'s recipe for many sessions in one process), its lowest and top
    #: levels only: what the top level's outlier is once CPython's full collections no
    #: longer scan the sessions. None: not run.
    frozen_turns: TurnPlan | None = field(
        default_factory=lambda: TurnPlan(levels=(1, 1000), freeze_gc=True)
    )


FULL = Plan()
QUICK = Plan(
    sessions=2,
    settle=0.5,
    window=2.0,
    rounds=1,
    turns=TurnPlan(levels=(1, 50), min_turns=10, spread=2.0),
    frozen_turns=None,
)


def current_plan() -> Plan:
    """:data:`QUICK` when ``BENCH_LOAD_QUICK`` is set to anything but 0, else :data:`FULL`."""
    return QUICK if os.environ.get(QUICK_ENV, "0") not in ("", "0") else FULL


# --------------------------------------------------------------------------- (a), pure


def core_pct_per_session(probe: dict[str, Any]) -> float:
    """% of one core per session: client CPU seconds / window / sessions."""
    return 100.0 * float(probe["client_cpu_s"]) / float(probe["window_s"]) / int(probe["sessions"])


def ratio_of(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator`` when both are known and the denominator positive."""
    if numerator is None or denominator is None or denominator <= 0.0:
        return None
    return numerator / denominator


@dataclass(frozen=True)
class ModeCpu:
    """Part (a)'s result for one mode: every round's probe of each client."""

    mode: Mode
    sdk: list[dict[str, Any]]
    bare: list[dict[str, Any]]

    def probes(self, impl: str) -> list[dict[str, Any]]:
        return self.sdk if impl == "sdk" else self.bare

    def pct(self, impl: str) -> float | None:
        """Mean % of a core per session over the rounds that measured (None: none did)."""
        values = [core_pct_per_session(p) for p in self.probes(impl) if "error" not in p]
        return sum(values) / len(values) if values else None

    def lag_p99(self, impl: str) -> float | None:
        """Mean over the rounds of the client loop's lag p99 (ms; None: not measured)."""
        values = [
            float(p["loop_lag_p99_ms"])
            for p in self.probes(impl)
            if "error" not in p and p.get("loop_lag_p99_ms") is not None
        ]
        return sum(values) / len(values) if values else None

    @property
    def ratio(self) -> float | None:
        return ratio_of(self.pct("sdk"), self.pct("bare"))

    @property
    def added_points(self) -> float | None:
        """What the SDK adds, in points of a core per session (SDK minus bare)."""
        sdk, bare = self.pct("sdk"), self.pct("bare")
        return None if sdk is None or bare is None else sdk - bare


def by_mode(results: Sequence[dict[str, Any]], modes: Sequence[Mode] = MODES) -> list[ModeCpu]:
    """The probes grouped per mode, in the modes' order."""

    def of(key: str, impl: str) -> list[dict[str, Any]]:
        return [r for r in results if r["mode"] == key and r["impl"] == impl]

    return [ModeCpu(m, of(m.key, "sdk"), of(m.key, "bare")) for m in modes]


def cpu_rows(items: Sequence[ModeCpu], sessions: int) -> list[Row]:
    rows: list[Row] = []
    for item in items:
        label = item.mode.label
        target = (
            Target("<=", item.mode.target_pct, "% core")
            if item.mode.target_pct is not None
            else None
        )
        sdk, bare, ratio = item.pct("sdk"), item.pct("bare"), item.ratio
        rows.append(Row(f"SDK CPU/session, {label}", sessions, _nan(sdk), "% core", target=target))
        if item.mode.floor_pct is not None:
            rows.append(Row(f"  floor, {label}", sessions, item.mode.floor_pct, "% core"))
        if item.mode.bare is not None:
            rows.append(Row(f"  bare aiortc CPU/session, {label}", sessions, _nan(bare), "% core"))
            if bare is not None and bare >= MIN_RATIO_BASE:  # else: a ratio of two zeros
                rows.append(Row(f"  SDK/bare, {label}", sessions, _nan(ratio), "x"))
        lag = item.lag_p99("sdk")
        if lag is not None:
            rows.append(Row(f"  SDK loop lag p99, {label}", sessions, lag, "ms"))
    found = {item.mode.key: item.pct("sdk") for item in items}
    unwatched, audio = found.get("av_unwatched"), found.get("audio_pcm")
    if unwatched is not None and audio is not None:
        rows.append(
            Row(
                "SDK audio+video nobody watching, minus audio-only PCM",
                sessions,
                unwatched - audio,
                "points",
                target=Target("<=", 0.5, "points"),
            )
        )
    return rows


def _nan(value: float | None) -> float:
    return float("nan") if value is None else value


def _span(values: Sequence[float], fmt: str) -> str:
    """``min-max`` of ``values`` in ``fmt`` (one number when both read the same)."""
    low, high = format(min(values), fmt), format(max(values), fmt)
    return low if low == high else f"{low}-{high}"


def _probe_note(item: ModeCpu) -> str:
    """One line per mode: each round's figure, and what every probe did and shared."""
    parts = [] if item.mode.note is None else [item.mode.note]
    if item.added_points is not None:
        parts.append(f"SDK adds {item.added_points:+.2f} points of a core per session")
    good = [p for p in (*item.sdk, *item.bare) if "error" not in p]
    for impl, measured in (("SDK", item.sdk), ("bare", item.bare)):
        if measured:
            parts.append(
                f"{impl} rounds "
                + ", ".join(
                    f"ERROR {p['error']}" if "error" in p else f"{core_pct_per_session(p):.2f}%"
                    for p in measured
                )
            )
    if good:
        kinds = sorted({k for p in good for k in p["frames_per_session_per_s"]})
        uplink = [p["uplink_packets_per_session_per_s"] for p in good]
        parts.append(f"uplink {_span(uplink, '.1f')} pkt/s per session")
        for kind in kinds:
            rates = [p["frames_per_session_per_s"].get(kind, 0.0) for p in good]
            parts.append(f"received {kind} {_span(rates, '.1f')}/s")
        server = [100.0 * p["server_cpu_s"] / p["window_s"] for p in good]
        other = [100.0 * p["other_processes_cores"] for p in good]
        parts.append(f"server {_span(server, '.0f')}% of a core")
        parts.append(f"other processes {_span(other, '.0f')}% of a core")
    return f"{item.mode.label}: " + "; ".join(parts) + "."


# --------------------------------------------------------------------------- (b), pure


@dataclass(frozen=True)
class LevelTurns:
    """Part (b)'s result for one level, with the p90 ratios to the single session's."""

    level: int
    record: dict[str, Any]
    ended_ratio: float | None
    text_ratio: float | None

    def p90(self, metric: str) -> float | None:
        summary = self.record.get(metric)
        return None if summary is None else float(summary["p90_ms"])

    @property
    def all_answered(self) -> bool:
        return "error" not in self.record and self.record.get("sessions_answered") == self.level

    def passed(self, limit: float = P90_LIMIT) -> bool:
        """Every session answered and the turn-ended p90 within ``limit`` x the single's."""
        if not self.all_answered:
            return False
        return self.ended_ratio is None or self.ended_ratio < limit


def levels_with_ratios(records: Sequence[dict[str, Any]]) -> list[LevelTurns]:
    """Each level's p90s against the lowest level's (the single session's)."""
    if not records:
        return []
    base = min(records, key=lambda r: int(r["level"]))

    def p90(record: dict[str, Any], metric: str) -> float | None:
        summary = record.get(metric)
        return None if summary is None else float(summary["p90_ms"])

    return [
        LevelTurns(
            int(r["level"]),
            r,
            ratio_of(p90(r, "ended_ms"), p90(base, "ended_ms")),
            ratio_of(p90(r, "first_text_ms"), p90(base, "first_text_ms")),
        )
        for r in records
    ]


def sessions_per_process(levels: Sequence[LevelTurns], limit: float = P90_LIMIT) -> int:
    """The highest level reached with every level up to it passing (0: none passed)."""
    best = 0
    for level in sorted(levels, key=lambda lv: lv.level):
        if not level.passed(limit):
            break
        best = level.level
    return best


def turn_rows(levels: Sequence[LevelTurns], top: int) -> list[Row]:
    rows: list[Row] = []
    for lv in levels:
        record = lv.record
        for metric, what in (("ended_ms", "agent_turn_ended"), ("first_text_ms", "agent_text")):
            summary = record.get(metric)
            if summary is None:
                continue
            rows.append(
                Row(
                    f"speak -> {what}, {lv.level} sessions",
                    int(summary["n"]),
                    float(summary["median_ms"]),
                    "ms",
                    float(summary["p90_ms"]),
                    float(summary["max_ms"]),
                )
            )
        if lv.level > min(x.level for x in levels):
            rows.append(
                Row(
                    f"  p90 / 1 session's, {lv.level} sessions",
                    int(record.get("turns_answered", 0)),
                    _nan(lv.ended_ratio),
                    "x",
                    target=Target("<", P90_LIMIT, "x"),
                )
            )
    if levels:
        last = max(levels, key=lambda lv: lv.level)
        rows.append(
            Row(
                f"sessions answered, {last.level} sessions",
                last.level,
                float(last.record.get("sessions_answered", 0)),
                "sessions",
                target=Target(">=", float(top), "sessions"),
            )
        )
    rows.append(
        Row(
            "control-only sessions per process (all answered, p90 < 2x)",
            len(levels),
            float(sessions_per_process(levels)),
            "sessions",
            target=Target(">=", float(top), "sessions"),
        )
    )
    return rows


def _gc_ms(record: dict[str, Any], key: str) -> float:
    return float((record.get(key) or {}).get("longest_ms", math.nan))


def _level_note(lv: LevelTurns) -> str:
    r = lv.record
    if "window_s" not in r:
        return (
            f"{lv.level}: ERROR {r.get('error', 'not measured')} (connected {r.get('connected')})"
        )
    lag = (r.get("loop_lag_ms") or {}).get("p90_ms", math.nan)
    server_lag = (r.get("server_loop_lag_ms") or {}).get("p90_ms", math.nan)
    connect = (r.get("connect_ms") or {}).get("p90_ms", math.nan)
    saturated = r.get("saturated", saturation(r))
    whose = "saturated: " + " + ".join(saturated) if saturated else "nothing saturated"
    return (
        f"{lv.level}: {r['sessions_answered']}/{lv.level} answered, connect {r['connect_s']:.1f} s "
        f"(p90 {connect:.0f} ms each), client {r['client_core_share']:.0%} / server "
        f"{r['server_core_share']:.0%} core, loop lag p90 client {lag:.1f} ms / server "
        f"{server_lag:.1f} ms, longest GC pause client {_gc_ms(r, 'client_gc'):.0f} ms / "
        f"server {_gc_ms(r, 'server_gc'):.0f} ms, other processes "
        f"{r['other_processes_cores']:.0%} ({whose}); first-text p90 x{_nan(lv.text_ratio):.2f}; "
        f"after close: server sessions {r.get('server_left')}, tasks {r.get('tasks_leaked')}, "
        f"fds {r.get('fds_leaked')}"
    )


# --------------------------------------------------------------------------- figure


async def _measure(plan: Plan) -> dict[str, Any]:
    async with ChildServer() as server:
        cpu = await probes(server, plan.sessions, plan.settle, plan.window, rounds=plan.rounds)
    async with ChildServer(**TURN_SERVER_OPTIONS) as server:
        turns: dict[str, Any] = await run_child(
            ramp_in_child, (server.url, server.token, plan_dict(plan.turns)), 600.0
        )
        frozen: dict[str, Any] | None = None
        if plan.frozen_turns is not None:
            frozen = await run_child(
                ramp_in_child, (server.url, server.token, plan_dict(plan.frozen_turns)), 600.0
            )
    return {"cpu": cpu, "turns": turns, "frozen_turns": frozen}


def render(measured: dict[str, Any], plan: Plan) -> FigureResult:
    """The figure from raw measurements (pure: no I/O)."""
    result = FigureResult("load", TITLE)
    items = by_mode(measured["cpu"])
    turns = measured["turns"]
    levels = levels_with_ratios(turns.get("levels", []))
    top = max(plan.turns.levels)
    result.rows = cpu_rows(items, plan.sessions) + turn_rows(levels, top)
    frozen = measured.get("frozen_turns")
    frozen_levels = levels_with_ratios(frozen.get("levels", [])) if frozen else []
    for lv in frozen_levels:
        if lv.level > min(x.level for x in frozen_levels):
            result.rows.append(
                Row(
                    f"  p90 / 1 session's, {lv.level} sessions, gc.freeze() once connected",
                    int(lv.record.get("turns_answered", 0)),
                    _nan(lv.ended_ratio),
                    "x",
                    target=Target("<", P90_LIMIT, "x"),
                )
            )
    result.notes = [
        f"(a) % of one core per session: client process_time (all threads) over a "
        f"{plan.window:g} s window after {plan.settle:g} s settle, K={plan.sessions} sessions in "
        f"a fresh child process per (mode, client), mean of {plan.rounds} round(s) in ABBA "
        f"order; staging server in another child process. "
        f"Bare = python-socketio + aiortc + the SDK's wire builders, no AvatarSession. Targets "
        f"(issue 23) are for the SDK: audio-only <= 3% PCM, <= 1.5% pre-encoded, audio+video "
        f"watched <= 5%, unwatched within 0.5 point of audio-only; each 'floor' row is the "
        f"cost of the same work done at the floor (Opus encode + decode + SRTP on the loop, "
        f"issue 23's estimate; it leaves out the wake-ups, see figure wakeups), information only. "
        f"The client loop's lag is measured by a 20 ms ticker in both clients in a "
        f"{LAG_WINDOW:g} s window after the CPU window (its wake-ups are not charged to the "
        f"sessions). The pre-encoded uplink is "
        f"EncodedToneSource (440 Hz, encoded once per process) for both clients.",
        *(_probe_note(item) for item in items),
        f"(b) control-only SDK sessions in one child process, connected in batches of "
        f"{plan.turns.batch}; one text turn per session (at least {plan.turns.min_turns} turns "
        f"per level) spread over {plan.turns.spread:g} s; staging server in its own process"
        + (f" with {TURN_SERVER_OPTIONS}" if TURN_SERVER_OPTIONS else " with its defaults")
        + ". Ratios are p90 against the lowest level's p90 (speak -> agent_turn_ended).",
        *(_level_note(lv) for lv in levels),
    ]
    if frozen_levels:
        result.notes += [
            "(b, frozen) the same ramp at its lowest and top levels with gc.freeze() in the "
            "client and the staging server once a level's sessions are connected "
            "(docs/fleet.md): a full collection then skips the sessions' long-lived objects.",
            *(_level_note(lv) for lv in frozen_levels),
        ]
    if frozen and "error" in frozen:
        result.notes.append(f"(b, frozen) ERROR: {frozen['error']}")
    if "error" in turns:
        result.notes.append(f"(b) ERROR: {turns['error']}")
    result.data = {
        "plan": {
            "sessions": plan.sessions,
            "settle_s": plan.settle,
            "window_s": plan.window,
            "turns": plan_dict(plan.turns),
            "turn_server_options": TURN_SERVER_OPTIONS,
        },
        "cpu": [
            {
                "mode": item.mode.key,
                "label": item.mode.label,
                "sdk_pct_core_per_session": item.pct("sdk"),
                "bare_pct_core_per_session": item.pct("bare"),
                "ratio": item.ratio,
                "target_pct": item.mode.target_pct,
                "sdk_minus_bare_points": item.added_points,
                "probes": [*item.sdk, *item.bare],
            }
            for item in items
        ],
        "turns": {
            "levels": [
                {**lv.record, "p90_ratio": lv.ended_ratio, "first_text_p90_ratio": lv.text_ratio}
                for lv in levels
            ],
            "sessions_per_process": sessions_per_process(levels),
            "error": turns.get("error"),
        },
        "frozen_turns": None
        if frozen is None
        else {
            "levels": [{**lv.record, "p90_ratio": lv.ended_ratio} for lv in frozen_levels],
            "error": frozen.get("error"),
        },
    }
    return result


def run(plan: Plan | None = None) -> FigureResult:
    """Run the figure (``BENCH_LOAD_QUICK=1``: the quick plan)."""
    chosen = plan or current_plan()
    result = render(asyncio.run(_measure(chosen)), chosen)
    if chosen is QUICK:
        result.notes.insert(0, f"QUICK run ({QUICK_ENV}=1): short windows, levels 1 and 50.")
    return result
