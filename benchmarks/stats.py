"""Statistics and result records shared by every figure."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Comparison = Literal["<", "<=", ">", ">="]


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100), linear between closest ranks (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0.0 <= q <= 100.0:
        raise ValueError("q must be within [0, 100]")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = math.ceil(rank)
    if low == high:
        return ordered[low]
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True, slots=True)
class Summary:
    """Order statistics of one sample set, in the unit of the samples."""

    n: int
    median: float
    p90: float
    minimum: float
    maximum: float
    mean: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Summary:
        return cls(
            n=len(values),
            median=percentile(values, 50.0),
            p90=percentile(values, 90.0),
            minimum=min(values),
            maximum=max(values),
            mean=sum(values) / len(values),
        )

    def scaled(self, factor: float) -> Summary:
        """The same summary in another unit (e.g. seconds to milliseconds)."""
        return Summary(
            n=self.n,
            median=self.median * factor,
            p90=self.p90 * factor,
            minimum=self.minimum * factor,
            maximum=self.maximum * factor,
            mean=self.mean * factor,
        )

    def as_json(self, unit: str) -> dict[str, Any]:
        return {
            "n": self.n,
            f"median_{unit}": self.median,
            f"p90_{unit}": self.p90,
            f"min_{unit}": self.minimum,
            f"max_{unit}": self.maximum,
            f"mean_{unit}": self.mean,
        }


@dataclass(frozen=True, slots=True)
class Target:
    """An informational target: ``value <op> threshold``. Missing it never fails the run."""

    op: Comparison
    threshold: float
    unit: str

    def met(self, value: float) -> bool:
        if self.op == "<":
            return value < self.threshold
        if self.op == "<=":
            return value <= self.threshold
        if self.op == ">":
            return value > self.threshold
        return value >= self.threshold

    def verdict(self, value: float) -> str:
        return "PASS" if self.met(value) else "FAIL"

    def label(self) -> str:
        return f"{self.op} {self.threshold:,g} {self.unit}"

    def as_json(self) -> dict[str, Any]:
        return {"op": self.op, "threshold": self.threshold, "unit": self.unit}


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the results table."""

    label: str
    n: int
    median: float
    unit: str
    p90: float | None = None
    maximum: float | None = None
    target: Target | None = None

    @property
    def verdict(self) -> str:
        """PASS/FAIL of the median against the target ('' without a target)."""
        return self.target.verdict(self.median) if self.target is not None else ""

    @classmethod
    def of(cls, label: str, summary: Summary, unit: str, target: Target | None = None) -> Row:
        """The row of a summary: its count, median, p90 and maximum."""
        return cls(label, summary.n, summary.median, unit, summary.p90, summary.maximum, target)


@dataclass
class FigureResult:
    """What one figure measured: table rows, free-text notes and the JSON payload."""

    key: str
    title: str
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    error: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "seconds": self.seconds,
            "error": self.error,
            "notes": list(self.notes),
            **self.data,
        }


def format_number(value: float) -> str:
    """Compact human formatting: thousands separators for big values, 3 digits otherwise."""
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def ratio(numerator: float, denominator: float) -> float | None:
    """``numerator / denominator``, or None when the denominator is zero."""
    return numerator / denominator if denominator else None
