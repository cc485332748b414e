"""The chart of ``RESULTS.md``: recovery durations per tier (matplotlib, Agg backend).

One row per tier, every sample a dot over its box (median and quartiles), on a log scale:
the socket tier takes milliseconds and the cold tier seconds, and both must stay readable.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .markdown import Tier


def plot_tiers(tiers: Sequence[Tier], path: Path) -> Path:
    """Draw ``tiers`` (milliseconds) into the PNG at ``path``."""
    # Imported here: matplotlib is slow to import and only the report needs it.
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")  # no display: benchmarks run headless
    import matplotlib.pyplot as plt  # noqa: PLC0415

    ordered = list(reversed(tiers))  # the first tier at the top
    labels = [
        f"{tier.label}\nn={tier.n}"
        + (f", {len(tier.fell_back)} fell back" if tier.fell_back else "")
        for tier in ordered
    ]
    figure, axes = plt.subplots(figsize=(9.0, 1.0 + 0.9 * len(ordered)), dpi=100)
    try:
        axes.boxplot(
            [tier.samples_ms for tier in ordered],
            orientation="horizontal",
            widths=0.5,
            showfliers=False,
            medianprops={"color": "#c0392b", "linewidth": 2},
        )
        for row, tier in enumerate(ordered, start=1):
            jitter = [row + 0.12 * ((i % 5) - 2) / 2 for i in range(tier.n)]
            axes.scatter(tier.samples_ms, jitter, s=12, alpha=0.6, color="#2c3e50", zorder=3)
            median = tier.median()
            if median is not None:
                text = (
                    f"{median:.1f} ms"
                    if median < 10
                    else f"{median:.0f} ms"
                    if median < 1000
                    else f"{median / 1000:.2f} s"
                )
                axes.annotate(
                    f"median {text}",
                    (median, row + 0.32),
                    ha="center",
                    fontsize=8,
                    color="#c0392b",
                )
        axes.set_yticks(range(1, len(ordered) + 1), labels, fontsize=9)
        axes.set_xscale("log")
        axes.set_xlabel("fault -> verified usable (ms, log scale)")
        axes.set_title("Recovery duration per tier (staging backend, loopback)")
        axes.grid(axis="x", which="both", alpha=0.3)
        figure.tight_layout()
        figure.savefig(path, format="png")
    finally:
        plt.close(figure)
    return path
