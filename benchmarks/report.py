"""The results table (stdout) and ``benchmarks/results.json``."""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import textwrap
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from avatar_sdk import __version__ as sdk_version

from .stats import FigureResult, Row, format_number

RESULTS_PATH = Path(__file__).resolve().parent / "results.json"

_LABEL = 46
_COLUMNS = (("n", 7), ("median", 15), ("p90", 11), ("max", 11), ("target", 14), ("verdict", 7))
_WIDTH = _LABEL + sum(width + 1 for _, width in _COLUMNS)


def environment() -> dict[str, Any]:
    """Where and with what the numbers were taken."""
    versions: dict[str, str] = {}
    for name in ("python-socketio", "python-engineio", "aiohttp"):
        with contextlib.suppress(PackageNotFoundError):
            versions[name] = version(name)
    return {
        "sdk_version": sdk_version,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "packages": versions,
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def _value(value: float | None, unit: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{format_number(value)} {unit}"


def _row_line(row: Row) -> str:
    cells = (
        str(row.n),
        _value(row.median, row.unit),
        _value(row.p90, row.unit) if row.p90 is not None else "-",
        _value(row.maximum, row.unit) if row.maximum is not None else "-",
        row.target.label() if row.target is not None else "",
        row.verdict,
    )
    label = row.label if len(row.label) <= _LABEL else row.label[: _LABEL - 1] + "~"
    parts = [label.ljust(_LABEL)]
    parts += [cell.rjust(width) for cell, (_, width) in zip(cells, _COLUMNS, strict=True)]
    return " ".join(parts)


def render(figures: list[FigureResult], env: dict[str, Any], seconds: float) -> str:
    """The whole report as text."""
    lines = [
        f"avatar_sdk benchmarks - avatar-sdk {env['sdk_version']}, {env['python']}, "
        f"{env['cpus']} CPUs, {env['platform']}",
        "",
        " ".join(["metric".ljust(_LABEL)] + [name.rjust(width) for name, width in _COLUMNS]),
        "-" * _WIDTH,
    ]
    for number, figure in enumerate(figures, start=1):
        head = f"[{number}] {figure.title}"
        lines.append(f"{head} ".ljust(_WIDTH - 10, ".") + f"{figure.seconds:8.1f} s")
        if figure.error is not None:
            lines.append(f"  ERROR: {figure.error}")
        lines.extend(_row_line(row) for row in figure.rows)
        for note in figure.notes:
            lines.extend(
                textwrap.wrap(note, _WIDTH, initial_indent="  * ", subsequent_indent="    ")
            )
        lines.append("")
    lines.append(f"total {seconds:.1f} s; targets are information only (exit status ignores them)")
    return "\n".join(lines)


def _row_json(row: Row) -> dict[str, Any]:
    return {
        "label": row.label,
        "n": row.n,
        "unit": row.unit,
        "median": row.median,
        "p90": row.p90,
        "max": row.maximum,
        "target": row.target.as_json() if row.target is not None else None,
        "verdict": row.verdict or None,
    }


def write_json(
    figures: list[FigureResult], env: dict[str, Any], seconds: float, path: Path = RESULTS_PATH
) -> Path:
    """Write every figure, the table rows and the environment to ``path``."""
    document = {
        "environment": env,
        "total_seconds": seconds,
        "figures": {figure.key: figure.as_json() for figure in figures},
        "table": [
            {"figure": figure.key, **_row_json(row)} for figure in figures for row in figure.rows
        ],
    }
    path.write_text(json.dumps(document, indent=2, default=str) + "\n", encoding="utf-8")
    return path
