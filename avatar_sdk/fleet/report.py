"""What a fleet run shows: a progress line while it runs, a summary table at the end, and a
self-contained HTML page with an SVG chart of reply latency and active sessions over time.

The chart is hand-drawn SVG (a few polylines and axes) rather than matplotlib or a
JavaScript charting library: the page must open anywhere offline, and the runtime must not
depend on a plotting stack. Everything here is a pure function of a snapshot/report, so the
CLI and tests use the same rendering.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .measure import LATENCIES, TURN_FIGURES

if TYPE_CHECKING:
    from .runner import FleetReport

__all__ = ["html_page", "progress_line", "summary_rows", "svg_chart", "write_html"]

_LABELS = {
    "connect": "connect",
    "greeting": "greeting",
    "text": "reply: first text",
    "audio": "reply: first audio",
    "generated": "reply: generated",
    "played": "reply: played",
    "voice_to_voice": "voice to voice",
    "wait": "turn: wait before sending",
}
#: A series with fewer points than this is drawn as points, not a line: a line through
#: three buckets draws a slope that no turn had (each bucket mixes whichever turns fell in).
MIN_LINE_POINTS = 8
#: Timeline series drawn on the chart: (latency, percentile, colour, dashed).
_SERIES = (
    ("text", "p50", "#1f77b4", False),
    ("text", "p90", "#1f77b4", True),
    ("audio", "p50", "#2ca02c", False),
    ("audio", "p90", "#2ca02c", True),
    ("generated", "p50", "#ff7f0e", False),
    ("generated", "p90", "#ff7f0e", True),
)


def ms(value: object) -> str:
    """Seconds as milliseconds for people (``-`` for none)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "-"
    return f"{1000 * value:.0f} ms" if value < 10 else f"{value:.1f} s"


def progress_line(snapshot: Mapping[str, Any], planned: int | None = None) -> str:
    """One line of live figures: sessions, turns and the reply latency percentiles."""
    of = f"/{planned}" if planned else ""
    lat = snapshot["latency"]
    return (
        f"active {snapshot['active']}  started {snapshot['started']}{of}  "
        f"finished {snapshot['finished']}  failed {snapshot['failed']}  "
        f"turns {snapshot['turns']['ok']} ok/{snapshot['turns']['failed']} failed  "
        f"reply p50 {ms(lat['text']['p50'])} p90 {ms(lat['text']['p90'])}  "
        f"generated p50 {ms(lat['generated']['p50'])} p90 {ms(lat['generated']['p90'])}"
    )


def _counts(values: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(values.items())) or "-"


def _figure_row(label: str, figure: Mapping[str, Any]) -> list[str]:
    return [label, str(figure["count"]), ms(figure["p50"]), ms(figure["p90"]), ms(figure["max"])]


def summary_rows(snapshot: Mapping[str, Any]) -> list[list[str]]:
    """``[figure, count, p50, p90, max]`` rows: sessions, turns, latencies, recoveries by
    tier, errors by code, completion outcomes and custom metrics. A turn figure has its
    all-turns row, then (when the scenario takes more than one turn) a row per turn index,
    ``"reply: generated, turn 0"``: the first turn of a conversation is not the second."""
    rows = [
        ["sessions ok / failed", f"{snapshot['ok']} / {snapshot['failed']}", "", "", ""],
        [
            "turns ok / failed",
            f"{snapshot['turns']['ok']} / {snapshot['turns']['failed']}",
            "",
            "",
            "",
        ],
    ]
    by_turn: Mapping[str, Mapping[str, Any]] = snapshot.get("by_turn") or {}
    for name in LATENCIES:
        figure = snapshot["latency"][name]
        if not figure["count"]:
            continue
        rows.append(_figure_row(_LABELS[name], figure))
        if name in TURN_FIGURES and len(by_turn) > 1:
            for index, per_turn in by_turn.items():
                if per_turn[name]["count"]:
                    rows.append(_figure_row(f"{_LABELS[name]}, turn {index}", per_turn[name]))
    for tier, figure in snapshot["recoveries"].items():
        rows.append(
            [f"recovery: {tier}", str(figure["count"]), ms(figure["p50"]), ms(figure["p90"]),
             ms(figure["max"])]
        )  # fmt: skip
    renewals: Mapping[str, Any] = snapshot.get("renewals") or {}
    if renewals.get("count"):
        gap = renewals["gap"]
        rows.append(
            [f"renewals ({_counts(renewals['strategies'])})", str(renewals["count"]), "", "", ""]
        )
        if gap["count"]:
            rows.append(_figure_row("renewal gap", gap))
    for name, figure in snapshot["metrics"].items():
        p50, p90, top = (f"{figure[k]:.4g}" for k in ("p50", "p90", "max"))
        rows.append([f"metric: {name}", str(figure["count"]), p50, p90, top])
    rows.append(["failures by code", _counts(snapshot["failures"]), "", "", ""])
    rows.append(["errors by code", _counts(snapshot["errors"]), "", "", ""])
    rows.append(["completion outcomes", _counts(snapshot["outcomes"]), "", "", ""])
    return rows


SUMMARY_COLUMNS = ("figure", "count", "p50", "p90", "max")


# -- the chart ---------------------------------------------------------------------------------
def _nice_max(value: float) -> float:
    """A round axis top at or above ``value`` (1, 2 or 5 times a power of ten)."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if value <= step * power:
            return float(step * power)
    return float(10 * power)


def svg_chart(timeline: Sequence[Mapping[str, Any]], *, width: int = 760, height: int = 320) -> str:
    """An SVG chart: reply latency p50 (solid) and p90 (dashed) in ms on the left axis,
    active sessions (grey area) on the right axis, seconds from the start below. A series
    with fewer than :data:`MIN_LINE_POINTS` buckets is drawn as points (one per bucket,
    no line between them)."""
    left, right, top, bottom = 60, 60, 20, 40
    plot_w, plot_h = width - left - right, height - top - bottom
    t_max = max((float(row["t"]) for row in timeline), default=1.0) or 1.0
    lat_values = [
        float(row[f"{name}_{pct}"]) * 1000
        for row in timeline
        for name, pct, _, _ in _SERIES
        if row.get(f"{name}_{pct}") is not None
    ]
    lat_max = _nice_max(max(lat_values, default=0.0))
    active_max = _nice_max(max((float(row["active"]) for row in timeline), default=0.0))

    def x(t: float) -> float:
        return left + plot_w * t / t_max

    def y(value: float, top_value: float) -> float:
        return top + plot_h * (1 - value / top_value)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11" '
        'role="img" aria-label="latency and active sessions over time">',
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#fff" '
        'stroke="#ccc"/>',
    ]
    for i in range(5):  # grid and both axes' labels
        frac = i / 4
        gy = top + plot_h * (1 - frac)
        parts.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{gy:.1f}" y2="{gy:.1f}" stroke="#eee"/>'
        )
        parts.append(
            f'<text x="{left - 6}" y="{gy + 4:.1f}" text-anchor="end">{lat_max * frac:g}</text>'
        )
        rx, gx, ty = left + plot_w + 6, left + plot_w * frac, top + plot_h + 16
        parts.append(f'<text x="{rx}" y="{gy + 4:.1f}" fill="#888">{active_max * frac:g}</text>')
        parts.append(f'<text x="{gx:.1f}" y="{ty}" text-anchor="middle">{t_max * frac:.3g}</text>')
    parts.append(
        f'<text x="{left + plot_w / 2}" y="{height - 6}" text-anchor="middle">seconds</text>'
        f'<text x="14" y="{top + plot_h / 2}" transform="rotate(-90 14 {top + plot_h / 2})" '
        'text-anchor="middle">latency (ms)</text>'
        f'<text x="{width - 10}" y="{top + plot_h / 2}" '
        f'transform="rotate(90 {width - 10} {top + plot_h / 2})" text-anchor="middle" '
        'fill="#888">active sessions</text>'
    )
    if timeline:
        area = [f"{x(0):.1f},{y(0, active_max):.1f}"]
        area += [
            f"{x(float(r['t'])):.1f},{y(float(r['active']), active_max):.1f}" for r in timeline
        ]
        area.append(f"{x(float(timeline[-1]['t'])):.1f},{y(0, active_max):.1f}")
        parts.append(
            f'<polygon class="active" points="{" ".join(area)}" fill="#999" fill-opacity="0.25"/>'
        )
    legend = []
    for name, pct, colour, dashed in _SERIES:
        key = f"{name}_{pct}"
        points = [
            f"{x(float(r['t'])):.1f},{y(float(r[key]) * 1000, lat_max):.1f}"
            for r in timeline
            if r.get(key) is not None
        ]
        if not points:
            continue
        dash = ' stroke-dasharray="5,3"' if dashed else ""
        if len(points) >= MIN_LINE_POINTS:
            parts.append(
                f'<polyline class="series" data-series="{key}" points="{" ".join(points)}" '
                f'fill="none" stroke="{colour}" stroke-width="1.8"{dash}/>'
            )
        else:
            hollow = 'fill="#fff" ' if dashed else f'fill="{colour}" '  # p90: hollow
            dots = "".join(
                f'<circle cx="{p.split(",")[0]}" cy="{p.split(",")[1]}" r="3.5" {hollow}'
                f'stroke="{colour}" stroke-width="1.5"/>'
                for p in points
            )
            parts.append(f'<g class="series points" data-series="{key}">{dots}</g>')
        legend.append((f"{_LABELS[name]} {pct}", colour, dashed))
    legend.append(("active sessions", "#999", False))
    for i, (label, colour, dashed) in enumerate(legend):
        ly = top + 12 + 14 * i
        dash = ' stroke-dasharray="5,3"' if dashed else ""
        parts.append(
            f'<line x1="{left + 8}" x2="{left + 28}" y1="{ly - 4}" y2="{ly - 4}" '
            f'stroke="{colour}" stroke-width="2"{dash}/>'
            f'<text x="{left + 32}" y="{ly}">{html.escape(label)}</text>'
        )
    parts.append("</svg>")
    return "\n".join(parts)


_STYLE = (
    "body{font-family:sans-serif;margin:2em;color:#222}"
    "table{border-collapse:collapse;margin:1em 0}"
    "td,th{border:1px solid #ddd;padding:4px 10px;text-align:left}"
    "th{background:#f4f4f4}"
)


def html_page(report: FleetReport) -> str:
    """A self-contained HTML page (no script, no external resource): the plan, the summary
    table and the chart."""
    plan = report.plan
    scenario = (
        plan.scenario
        if isinstance(plan.scenario, str)
        else getattr(plan.scenario, "__qualname__", "callable")
    )
    facts = [
        ("scenario", str(scenario)),
        ("engine", report.engine),
        ("sessions", f"{plan.sessions} at {plan.rate:g}/s on {plan.worker_count} worker(s)"),
        (
            "iterations",
            str(plan.iterations) + (f", duration {plan.duration:g} s" if plan.duration else ""),
        ),
        (
            "media",
            "audio+video" if plan.session.video else "audio" if plan.session.media else "off",
        ),
        ("elapsed", f"{report.elapsed:.1f} s, {report.measurements} measurements"),
    ]
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>"
        for row in summary_rows(report.stats)
    )
    head = "".join(f"<th>{c}</th>" for c in SUMMARY_COLUMNS)
    fact_rows = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in facts
    )
    status = "all sessions ok" if report.ok else f"{report.failed} session(s) failed"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>avatar-sdk fleet: {html.escape(str(scenario))}</title>"
        f"<style>{_STYLE}</style></head><body>"
        f"<h1>Fleet run: {html.escape(status)}</h1>"
        f'<table class="plan">{fact_rows}</table>'
        f"<h2>Latency and active sessions over time</h2>{svg_chart(report.timeline)}"
        f'<h2>Summary</h2><table class="summary"><tr>{head}</tr>{rows}</table>'
        "</body></html>\n"
    )


def write_html(report: FleetReport, path: str | Path) -> Path:
    """Write :func:`html_page` to ``path``; returns it."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(html_page(report), encoding="utf-8")
    return target
