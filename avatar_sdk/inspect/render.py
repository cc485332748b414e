"""A :class:`~.core.timeline.Timeline` as one self-contained HTML page (pure: text in,
text out).

Everything is inline (CSS, SVG; no script, no font, no image, nothing fetched), and the
page's Content-Security-Policy forbids any fetch, so it opens offline and from an
attachment. Every text taken from a record is escaped (an avatar's words, a tool's name, a
reason): the page shows it, never runs it. Each drawn element carries ``data-kind`` (and
``data-tier`` for a recovery) and a ``<title>``, the tooltip a browser shows on hover.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape
from typing import Final

from .core.timeline import LATENCY_FIGURES, Mark, Span, Timeline, Turn, seconds

#: Nothing may be fetched: styles inline, images only as data (none are used).
CSP: Final = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
WIDTH: Final = 1100  # the plot's width (px)
GUTTER: Final = 130  # the row labels' width (px)
ROW: Final = 26  # one row's height (px)
MIN_WIDTH: Final = 2.0  # the narrowest band drawn (px): a 1 ms recovery stays visible

#: Colours by state (the first prefix that matches), recovery tier and mark kind.
STATE_COLOURS: Final = (
    ("connected", "#3fa34d"),
    ("connecting", "#8ab6e8"),
    ("cold_reconnecting", "#e0603a"),
    ("reconnecting", "#f2b134"),
    ("renewing", "#9b6fd1"),
    ("queued", "#c9c9c9"),
    ("paused", "#b3c7d6"),
    ("disconnecting", "#9a9a9a"),
    ("ended", "#5c5c5c"),
    ("failed", "#c0392b"),
)
TIER_COLOURS: Final = {"socket": "#f2b134", "media": "#4fb3bf", "cold": "#e0603a"}
MARK_COLOURS: Final = {
    "error": "#c0392b",
    "tool_call": "#2e86de",
    "drop": "#e67e22",
    "stall": "#8e44ad",
    "swap": "#9b6fd1",
    "note": "#7f8c8d",
}
FIGURE_COLOURS: Final = {
    "text_latency": "#2e86de",
    "generated_latency": "#16a085",
    "audio_latency": "#e67e22",
    "played_latency": "#8e44ad",
    "voice_to_voice": "#c0392b",
}

STYLE: Final = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#222}
h1{font-size:20px}h2{font-size:17px;margin-top:32px}
svg{display:block;margin:8px 0;overflow:visible}
svg text{font-size:11px;fill:#333}
svg .axis line{stroke:#bbb}svg .row-label{font-weight:600}
[data-kind]:hover{opacity:.75;stroke:#000;stroke-width:1}
table{border-collapse:collapse;margin:8px 0}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
td:first-child{white-space:nowrap}
th{background:#f4f4f4}.notes{color:#555}.legend span{display:inline-block;margin-right:14px}
.legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:middle}
"""


def state_colour(state: str) -> str:
    for prefix, colour in STATE_COLOURS:
        if state.startswith(prefix):
            return colour
    return "#b0b7bf"


def tooltip(label: str, start: float, end: float | None, details: Iterable[tuple[str, str]]) -> str:
    """The hover text of an element: what, when, how long, and its details."""
    lines = [label, f"at {start:.3f} s"]
    if end is not None:
        lines.append(f"to {end:.3f} s ({seconds(max(0.0, end - start))})")
    lines += [f"{key}: {value}" for key, value in details]
    return "\n".join(lines)


class Plot:
    """The SVG of one timeline: time to x, rows stacked from the top."""

    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline
        self.span = max(timeline.duration, 1e-3)
        self.parts: list[str] = []
        self.y = 24  # below the axis labels

    def x(self, t: float) -> float:
        return GUTTER + max(0.0, min(t, self.span)) / self.span * WIDTH

    def row(self, label: str) -> float:
        top = self.y
        self.parts.append(
            f'<text class="row-label" x="4" y="{top + ROW * 0.65:.1f}">{escape(label)}</text>'
        )
        self.y += ROW
        return top

    def band(
        self,
        top: float,
        span: Span,
        colour: str,
        *,
        height: float = ROW - 6,
        text: str | None = None,
    ) -> None:
        end = span.end if span.end is not None else self.timeline.duration
        left, right = self.x(span.start), self.x(end)
        width = max(MIN_WIDTH, right - left)
        tier = f' data-tier="{escape(span.tier)}"' if span.tier else ""
        tip = tooltip(span.label, span.start, span.end, span.details)
        label = ""
        if text and width > 7 * len(text):
            label = (
                f'<text x="{left + 3:.1f}" y="{top + height * 0.7 + 3:.1f}" '
                f'pointer-events="none">{escape(text)}</text>'
            )
        self.parts.append(
            f'<g data-kind="{escape(span.kind)}"{tier} data-label="{escape(span.label)}" '
            f'data-start="{span.start:.4f}" data-end="{end:.4f}">'
            f"<title>{escape(tip)}</title>"
            f'<rect x="{left:.1f}" y="{top + 3:.1f}" width="{width:.1f}" height="{height:.1f}" '
            f'fill="{colour}" rx="2"/>{label}</g>'
        )

    def mark(self, top: float, mark: Mark) -> None:
        x = self.x(mark.t)
        colour = MARK_COLOURS.get(mark.kind, "#555")
        tip = tooltip(mark.label, mark.t, None, mark.details)
        mid = top + ROW / 2
        self.parts.append(
            f'<g data-kind="{escape(mark.kind)}" data-label="{escape(mark.label)}" '
            f'data-start="{mark.t:.4f}"><title>{escape(tip)}</title>'
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top + 2:.1f}" y2="{top + ROW - 2:.1f}" '
            f'stroke="{colour}" stroke-width="2"/>'
            f'<path d="M{x:.1f} {mid - 6:.1f}l6 6l-6 6l-6 -6z" fill="{colour}"/></g>'
        )

    def turn(self, top: float, turn: Turn) -> None:
        left, right = self.x(turn.start), self.x(turn.end)
        width = max(MIN_WIDTH, right - left)
        figures = " ".join(
            f'data-{name.replace("_", "-")}="{value:.4f}"' for name, value in turn.figures
        )
        details = [("source", turn.source)]
        details += [(name, seconds(turn.figure(name))) for name in LATENCY_FIGURES]
        if turn.interrupted:
            details.append(("interrupted", "yes"))
        if turn.said:
            details.append(("said", turn.said))
        tip = tooltip(turn.label, turn.start, turn.end, details)
        ticks = "".join(
            f'<line data-figure="{name}" x1="{self.x(turn.start + value):.1f}" '
            f'x2="{self.x(turn.start + value):.1f}" y1="{top + 2:.1f}" y2="{top + ROW - 2:.1f}" '
            f'stroke="{FIGURE_COLOURS.get(name, "#333")}" stroke-width="2"/>'
            for name, value in turn.figures
        )
        self.parts.append(
            f'<g data-kind="turn" data-label="{escape(turn.label)}" data-start="{turn.start:.4f}" '
            f"{figures}><title>{escape(tip)}</title>"
            f'<rect x="{left:.1f}" y="{top + 7:.1f}" width="{width:.1f}" height="{ROW - 14}" '
            f'fill="#d6e4f5" stroke="#2e86de" stroke-width="1"/>{ticks}</g>'
        )

    def axis(self) -> None:
        step = nice_step(self.span)
        ticks = []
        t = 0.0
        while t <= self.span + 1e-9:
            x = self.x(t)
            ticks.append(
                f'<line x1="{x:.1f}" x2="{x:.1f}" y1="16" y2="{self.y:.1f}"/>'
                f'<text x="{x + 2:.1f}" y="12">{t:.3g} s</text>'
            )
            t += step
        self.parts.insert(0, f'<g class="axis">{"".join(ticks)}</g>')

    def svg(self) -> str:
        line = self.timeline
        top = self.row("states")
        for span in line.states:
            self.band(top, span, state_colour(span.label), text=span.label)
        for tier in ("socket", "media", "cold"):
            spans = [s for s in line.spans if s.kind == "recovery" and s.tier == tier]
            if spans:
                top = self.row(f"{tier} recovery")
                for span in spans:
                    self.band(top, span, TIER_COLOURS[tier])
        for kind, label, colour in (
            ("renewal", "renewals", "#9b6fd1"),
            ("media_gap", "media gaps", "#4fb3bf"),
        ):
            spans = [s for s in line.spans if s.kind == kind]
            if spans:
                top = self.row(label)
                for span in spans:
                    self.band(top, span, colour)
        if line.turns:
            top = self.row("turns")
            for turn in line.turns:
                self.turn(top, turn)
        if line.marks:
            top = self.row("events")
            for mark in sorted(line.marks, key=lambda m: m.t):
                self.mark(top, mark)
        self.axis()
        height = self.y + 4
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{GUTTER + WIDTH + 20}" '
            f'height="{height}" viewBox="0 0 {GUTTER + WIDTH + 20} {height}">'
            + "".join(self.parts)
            + "</svg>"
        )


def nice_step(span: float) -> float:
    """A round tick interval giving 5 to 12 ticks over ``span`` seconds."""
    step = 1e-3
    while span / step > 12:
        for factor in (2, 2.5, 2):
            step *= factor
            if span / step <= 12:
                break
    return step


def turns_table(turns: Sequence[Turn]) -> str:
    if not turns:
        return ""
    head = "".join(f"<th>{name}</th>" for name in LATENCY_FIGURES)
    rows = "".join(
        f'<tr data-turn="{turn.index}"><td>{escape(turn.label)}</td><td>{turn.start:.3f} s</td>'
        f"<td>{escape(turn.source)}{' (interrupted)' if turn.interrupted else ''}</td>"
        + "".join(f"<td>{seconds(turn.figure(name))}</td>" for name in LATENCY_FIGURES)
        + f"<td>{escape(turn.said)}</td></tr>"
        for turn in turns
    )
    return (
        f"<table><tr><th>turn</th><th>origin</th><th>source</th>{head}<th>the avatar said</th>"
        f"</tr>{rows}</table>"
    )


def happenings_table(line: Timeline) -> str:
    items: list[tuple[float, str, str, str]] = []
    for span in line.spans:
        extra = ", ".join(f"{k}: {v}" for k, v in span.details)
        items.append((span.start, span.label, seconds(span.duration), extra))
    for mark in line.marks:
        extra = ", ".join(f"{k}: {v}" for k, v in mark.details)
        items.append((mark.t, mark.label, "", extra))
    if not items:
        return ""
    rows = "".join(
        f"<tr><td>{t:.3f} s</td><td>{escape(what)}</td><td>{how_long}</td>"
        f"<td>{escape(extra)}</td></tr>"
        for t, what, how_long, extra in sorted(items, key=lambda item: item[0])
    )
    return f"<table><tr><th>at</th><th>what</th><th>lasted</th><th>details</th></tr>{rows}</table>"


def legend() -> str:
    entries = [(f"state {name}", colour) for name, colour in STATE_COLOURS[:5]]
    entries += [(f"{tier} recovery", colour) for tier, colour in TIER_COLOURS.items()]
    entries += [(kind.replace("_", " "), colour) for kind, colour in MARK_COLOURS.items()]
    entries += [(name, colour) for name, colour in FIGURE_COLOURS.items()]
    return (
        '<p class="legend">'
        + "".join(
            f'<span><i style="background:{colour}"></i>{escape(name)}</span>'
            for name, colour in entries
        )
        + "</p>"
    )


def section(line: Timeline) -> str:
    notes = "".join(f'<p class="notes">{escape(note)}</p>' for note in line.notes)
    return (
        f'<section data-source="{escape(line.source)}"><h2>{escape(line.title)}</h2>'
        f"<p>{escape(line.source)}, {seconds(line.duration)}; hover an element for its "
        f"details.</p>{notes}{Plot(line).svg()}"
        f"<h3>Turns</h3>{turns_table(line.turns) or '<p>No turn.</p>'}"
        f"<h3>What happened</h3>{happenings_table(line) or '<p>Nothing else.</p>'}</section>"
    )


def render_page(timelines: Sequence[Timeline], title: str) -> str:
    """The whole page: one section per timeline."""
    body = "".join(section(line) for line in timelines) or "<p>No session in this file.</p>"
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        f"<title>{escape(title)}</title><style>{STYLE}</style></head>"
        f"<body><h1>{escape(title)}</h1>{legend()}{body}</body></html>\n"
    )


__all__ = ["CSP", "render_page"]
