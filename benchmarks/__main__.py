"""``python -m benchmarks [--only FIGURE,...] [--output PATH]``.

Figures: connect, recovery, throughput, media, pacing, latency, av_sync, resilience, uplink, guards,
wakeups, echo, load, loop_lag, fleet, telemetry, scripted, pipecat, renewal, netlab (root: the
network lab) (default: all), and asr (the ASR uplink part of resilience alone) and netlab_relay
(root: connect and recovery through a TURN relay, coturn), not in the default run.
``BENCH_LOAD_QUICK=1`` shortens ``load`` and ``fleet`` to a development run.

Runs every figure once, prints the table and writes ``benchmarks/results.json``, then
``benchmarks/RESULTS.md`` and its chart ``benchmarks/recovery-tiers.png`` from it
(``--no-report``: the JSON only). The exit status is 0 whatever the targets say; it is 1
only when a figure could not be measured.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path

from . import (
    av_sync,
    connect,
    echo,
    fleet,
    guards,
    latency,
    load,
    loop_lag,
    markdown,
    media,
    netlab,
    netlab_relay,
    pacing,
    pipecat,
    recovery,
    renewal,
    resilience,
    scripted,
    telemetry,
    throughput,
    uplink,
    wakeups,
)
from .harness import describe_error
from .report import RESULTS_PATH, environment, render, write_json
from .stats import FigureResult

FIGURES: dict[str, tuple[str, Callable[[], FigureResult]]] = {
    "connect": ("connect() -> connected (control plane)", connect.run),
    "recovery": ("socket-tier recovery: drop_socket() -> reconnected", recovery.run),
    "throughput": ("agent_raw_text throughput (one core)", throughput.run),
    "media": (media.TITLE, media.run),
    "pacing": (pacing.TITLE, pacing.run),
    "latency": (latency.TITLE, latency.run),
    "av_sync": (av_sync.TITLE, av_sync.run),
    "resilience": (resilience.TITLE, resilience.run),
    "uplink": (uplink.TITLE, uplink.run),
    "guards": (guards.TITLE, guards.run),
    "asr": (resilience.ASR_TITLE, resilience.run_asr),
    "load": (load.TITLE, load.run),
    "loop_lag": (loop_lag.TITLE, loop_lag.run_figure),
    "fleet": (fleet.TITLE, fleet.run),
    "telemetry": (telemetry.TITLE, telemetry.run),
    "scripted": (scripted.TITLE, scripted.run),
    "pipecat": (pipecat.TITLE, pipecat.run),
    "renewal": (renewal.TITLE, renewal.run),
    "netlab": (netlab.TITLE, netlab.run),
    "netlab_relay": (netlab_relay.TITLE, netlab_relay.run),
    "wakeups": (wakeups.TITLE, wakeups.run),
    "echo": (echo.TITLE, echo.run),
}
#: Figures run when ``--only`` is not given (``asr`` is part of ``resilience``).
DEFAULT = (
    "connect", "recovery", "throughput", "media", "pacing", "latency", "resilience", "uplink",
    "guards", "wakeups", "echo",
    "av_sync",
    "load",
    "loop_lag",
    "fleet",
    "telemetry",
    "scripted",
    "pipecat",
    "renewal",
    "netlab",
)  # fmt: skip


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument(
        "--only",
        default=",".join(DEFAULT),
        help="comma-separated figures to run (default: "
        + ", ".join(DEFAULT)
        + "): "
        + ", ".join(FIGURES),
    )
    parser.add_argument("--output", type=Path, default=RESULTS_PATH, help="JSON results path")
    parser.add_argument(
        "--report",
        type=Path,
        default=markdown.RESULTS_MD,
        help="Markdown report path (its chart is written beside it)",
    )
    parser.add_argument(
        "--no-report", action="store_true", help="write the JSON only (no RESULTS.md, no chart)"
    )
    args = parser.parse_args(argv)
    unknown = [name for name in args.only.split(",") if name not in FIGURES]
    if unknown:
        parser.error(f"unknown figure(s): {', '.join(unknown)}")
    return args


def _measure(key: str) -> FigureResult:
    title, run = FIGURES[key]
    started = time.perf_counter()
    try:
        result = run()
    except Exception as exc:  # one broken figure must not hide the others
        result = FigureResult(key, title, error=describe_error(exc))
    result.seconds = time.perf_counter() - started
    return result


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    env = environment()
    given = sys.argv[1:] if argv is None else argv
    env["command"] = " ".join(["python -m benchmarks", *map(shlex.quote, given)])
    started = time.perf_counter()
    figures: list[FigureResult] = []
    for key in args.only.split(","):
        print(f"running {key} ...", file=sys.stderr, flush=True)
        figures.append(_measure(key))
    seconds = time.perf_counter() - started
    print(render(figures, env, seconds))
    path = write_json(figures, env, seconds, args.output)
    print(f"results written to {path}")
    if not args.no_report:
        document = json.loads(path.read_text(encoding="utf-8"))
        chart = args.report.with_name(markdown.CHART_PNG.name)
        report, drawn = markdown.write(document, args.report, chart)
        print(f"report written to {report}" + (f", chart to {drawn}" if drawn else ""))
    return 1 if any(figure.error is not None for figure in figures) else 0


if __name__ == "__main__":
    sys.exit(main())
