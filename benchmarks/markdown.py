"""``benchmarks/RESULTS.md`` and its chart, written from a ``results.json`` document.

``python -m benchmarks`` writes both after every run; ``python -m benchmarks.markdown
[results.json]`` writes them again from saved results (no measuring).

The report says where the numbers were taken (machine, versions, command lines), gives n,
median and p90 for every figure, and counts the rounds that fell back to another tier
(they are excluded from a tier's sample, and listed, never silently dropped). The recovery
table sits between ``<!-- tiers:start -->`` and ``<!-- tiers:end -->`` so the documentation
can quote it (``tools/docgen.py``).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .chart import plot_tiers
from .stats import format_number, percentile

HERE = Path(__file__).resolve().parent
RESULTS_MD = HERE / "RESULTS.md"
CHART_PNG = HERE / "recovery-tiers.png"
TIERS_START = "<!-- tiers:start -->"
TIERS_END = "<!-- tiers:end -->"


@dataclass(frozen=True)
class Tier:
    """One line of the per-tier table: the samples of one recovery (or detection) part."""

    key: str
    label: str
    fault: str
    measured: str
    samples_ms: list[float]
    planned: int | None
    fell_back: list[str]
    figure: str
    recovery: bool  # a recovery duration (charted), not a detection delay

    @property
    def n(self) -> int:
        return len(self.samples_ms)

    def median(self) -> float | None:
        return percentile(self.samples_ms, 50.0) if self.samples_ms else None

    def p90(self) -> float | None:
        return percentile(self.samples_ms, 90.0) if self.samples_ms else None


def _duration(ms: float | None) -> str:
    if ms is None or math.isnan(ms):
        return "-"
    if ms >= 1000.0:
        return f"{format_number(ms / 1000.0)} s"
    return f"{format_number(ms)} ms"


#: (key, label, fault call, what is measured, resilience part, metric, is a recovery)
_RESILIENCE_PARTS = (
    (
        "asr",
        "media tier: uplink (ASR)",
        'faults.ice_failure("asr")',
        "fault -> media_recovered (ICE+DTLS up, RTP sent)",
        "verified",
        True,
    ),
    (
        "stv",
        "media tier: downlink (STV)",
        'faults.ice_failure("stv")',
        "fault -> media_recovered (first new decoded frame)",
        "verified",
        True,
    ),
    (
        "cold",
        "cold tier",
        "faults.drop_socket(recovery=False)",
        "fault -> reconnected (new socket, full handshake, playable gate)",
        "reconnected",
        True,
    ),
    (
        "stall",
        "detection: dead downlink",
        'faults.media_stall("stv")',
        "fault -> media_recovering",
        "detect",
        False,
    ),
    (
        "silent",
        "detection: silently dead socket",
        "faults.silent_socket(server_timeout=0.5)",
        "fault -> reconnecting (probe gave up)",
        "detect",
        False,
    ),
)


def _rerun_lines(env: dict[str, Any]) -> list[str]:
    """The Machine table's row for figures measured again later than the run (merged into
    its JSON by hand: ``environment.partial_reruns``)."""
    rerun = env.get("partial_reruns")
    if not rerun:
        return []
    figures = ", ".join(rerun.get("figures", []))
    return [
        f"| measured again | {figures}: started {rerun.get('started_at', '-')}, "
        f"`{rerun.get('command', '-')}` |"
    ]


def tiers(document: dict[str, Any]) -> list[Tier]:
    """The per-tier samples found in ``document`` (figures that were not run are absent)."""
    figures: dict[str, Any] = document.get("figures", {})
    out: list[Tier] = []
    recovery = figures.get("recovery")
    if recovery and not recovery.get("error") and "samples_wall_ms" in recovery:
        out.append(
            Tier(
                "socket",
                "socket tier",
                "faults.drop_socket()",
                "fault -> reconnected (same server session)",
                list(recovery["samples_wall_ms"]),
                recovery.get("drops"),
                [json.dumps(f, sort_keys=True) for f in recovery.get("fallbacks", [])],
                "recovery",
                True,
            )
        )
    rounds: dict[str, Any] = (figures.get("resilience") or {}).get("rounds", {})
    if "asr" not in rounds and figures.get("asr", {}).get("samples_ms"):
        asr = figures["asr"]
        fallbacks = asr.get("fallbacks", [])
        rounds = {**rounds, "asr": {"samples_ms": asr["samples_ms"], "fallbacks": fallbacks}}
    for key, label, fault, measured, metric, is_recovery in _RESILIENCE_PARTS:
        part = rounds.get(key)
        if not part or metric not in part.get("samples_ms", {}):
            continue
        out.append(
            Tier(
                key,
                label,
                fault,
                measured,
                list(part["samples_ms"][metric]),
                part.get("planned"),
                list(part.get("fallbacks", [])),
                "resilience" if "resilience" in figures else "asr",
                is_recovery,
            )
        )
    uplink = figures.get("uplink")
    if uplink and not uplink.get("error"):
        for key, label in _UPLINK_PARTS:
            part = uplink.get(key) or {}
            samples = part.get("samples_ms", {}).get("flowing")
            if not samples:
                continue
            out.append(
                Tier(
                    f"uplink_{key}",
                    f"detection + media tier: silent uplink death {label}",
                    'faults.ice_failure("asr", mode="blackhole")',
                    "fault -> audio decoded on a new uplink",
                    list(samples),
                    None,
                    list(part.get("fallbacks", [])),
                    "uplink",
                    False,
                )
            )
    return out


#: (scenario key in figure "uplink", label) for the tier table.
_UPLINK_PARTS = (
    ("first_report", "before the first receiver report"),
    ("after_recovery", "right after a media recovery"),
    ("slow_reports", "(server reporting every 4.5 s)"),
)


def _tier_table(rows: Sequence[Tier]) -> list[str]:
    lines = [
        TIERS_START,
        "| tier | fault injected | measured | n | median | p90 | fell back |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for tier in rows:
        planned = f" of {tier.planned}" if tier.planned is not None else ""
        lines.append(
            f"| {tier.label} | `{tier.fault}` | {tier.measured} | {tier.n}{planned} | "
            f"{_duration(tier.median())} | {_duration(tier.p90())} | {len(tier.fell_back)} |"
        )
    lines.append(TIERS_END)
    return lines


def _cell(text: str) -> str:
    """One table cell or list item: one line, pipes escaped outside code spans."""
    parts = re.split(r"(`[^`]*`)", " ".join(str(text).split()))
    return "".join(part if part.startswith("`") else part.replace("|", "\\|") for part in parts)


def _value(value: float | None, unit: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{format_number(value)} {unit}"


def _figure_section(key: str, figure: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        f"### {figure.get('title', key)}",
        "",
        f"`python -m benchmarks --only {key}`, {figure.get('seconds', 0.0):.1f} s.",
        "",
    ]
    if figure.get("error"):
        lines += [f"**Not measured:** {_cell(figure['error'])}", ""]
    if rows:
        lines += [
            "| metric | n | median | p90 | max | target | verdict |",
            "|---|---:|---:|---:|---:|---|---|",
        ]
        for row in rows:
            target = row.get("target")
            target_text = (
                f"{target['op']} {target['threshold']:,g} {target['unit']}" if target else ""
            )
            lines.append(
                f"| {_cell(row['label'])} | {row['n']} | {_value(row['median'], row['unit'])} | "
                f"{_value(row.get('p90'), row['unit'])} | {_value(row.get('max'), row['unit'])} | "
                f"{target_text} | {row.get('verdict') or ''} |"
            )
        lines.append("")
    parts = figure.get("rounds")
    if isinstance(parts, dict) and parts:
        lines += [
            "| part | planned | counted | fell back | stopped |",
            "|---|---:|---:|---:|---|",
        ]
        for name, part in parts.items():
            lines.append(
                f"| {name} | {part.get('planned', '-')} | {part.get('counted', '-')} | "
                f"{len(part.get('fallbacks', []))} | {_cell(part.get('stopped', ''))} |"
            )
        lines.append("")
    for note in figure.get("notes", []):
        lines.append(f"- {_cell(note)}")
    if figure.get("notes"):
        lines.append("")
    return lines


def render(document: dict[str, Any], chart: Path | None = None) -> str:
    """The whole report as Markdown."""
    env: dict[str, Any] = document.get("environment", {})
    figures: dict[str, Any] = document.get("figures", {})
    table: list[dict[str, Any]] = document.get("table", [])
    packages = ", ".join(f"{k} {v}" for k, v in env.get("packages", {}).items()) or "-"
    command = env.get("command", "python -m benchmarks")
    lines = [
        "# Benchmark results",
        "",
        f"Measured with `{command}` against the bundled staging backend, in one process on "
        "loopback. Written by `benchmarks/markdown.py` from the run's JSON results; targets "
        "are information only.",
        "",
        "## Machine",
        "",
        "| | |",
        "|---|---|",
        f"| avatar-sdk | {env.get('sdk_version', '-')} |",
        f"| Python | {env.get('python', '-')} |",
        f"| platform | {_cell(env.get('platform', '-'))} |",
        f"| CPUs | {env.get('cpus', '-')} |",
        f"| packages | {packages} |",
        f"| started | {env.get('started_at', '-')} |",
        f"| total time | {document.get('total_seconds', 0.0):.0f} s |",
        *_rerun_lines(env),
        "",
        "## Command lines",
        "",
        f"- this run: `{command}`",
        "- every figure: `make bench`, which runs `python -m benchmarks` and writes "
        "`benchmarks/results.json`, this report and its chart",
        "- one figure: the command under its heading below",
        "- this report again from saved results, without measuring: "
        "`python -m benchmarks.markdown benchmarks/results.json`",
        "",
        "## Recovery per tier",
        "",
        "From the injected fault to a verified-usable session (detection rows: to the moment "
        "the fault is noticed). A round that recovered on another tier than the one under "
        "test is not in that tier's sample: it is counted under *fell back* and listed below.",
        "",
    ]
    rows = tiers(document)
    lines += _tier_table(rows)
    lines.append("")
    if chart is not None:
        lines += [f"![Recovery durations per tier]({chart.name})", ""]
    fallbacks = [(tier.label, f) for tier in rows for f in tier.fell_back]
    if fallbacks:
        lines += ["Rounds that fell back:", ""]
        lines += [f"- {label}: {_cell(text)}" for label, text in fallbacks]
        lines.append("")
    lines += ["## Every figure", ""]
    for key, figure in figures.items():
        lines += _figure_section(key, figure, [r for r in table if r.get("figure") == key])
    return "\n".join(lines).rstrip("\n") + "\n"


def write(
    document: dict[str, Any], path: Path = RESULTS_MD, chart_path: Path = CHART_PNG
) -> tuple[Path, Path | None]:
    """Write the chart (when there is something to chart) and the report beside it."""
    recoveries = [tier for tier in tiers(document) if tier.recovery and tier.samples_ms]
    chart = plot_tiers(recoveries, chart_path) if recoveries else None
    path.write_text(render(document, chart), encoding="utf-8")
    return path, chart


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.markdown",
        description="Write benchmarks/RESULTS.md and its chart from saved results.",
    )
    parser.add_argument("results", nargs="?", type=Path, default=HERE / "results.json")
    parser.add_argument("--output", type=Path, default=RESULTS_MD)
    parser.add_argument("--chart", type=Path, default=CHART_PNG)
    args = parser.parse_args(argv)
    document = json.loads(args.results.read_text(encoding="utf-8"))
    report, chart = write(document, args.output, args.chart)
    print(f"report written to {report}" + (f", chart to {chart}" if chart else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
