"""Clicks in played audio: how long the longest burst of discontinuities lasts.

A click is a jump between two samples that the voice itself never makes (its steepest
slope, ``max_step``, times a margin): a dropped stretch that shifts a tone's phase, a
burst of garbage, a stream that restarts mid-wave. Samples are cut into 10 ms blocks; a
block that holds such a jump is a click block, and consecutive click blocks are one
click. :func:`longest_click` is the longest, in seconds: a clean stream, or one whose
voice starts and stops abruptly (one jump), has clicks of at most one block. Pure numpy,
for the speaker tests (``tests/integration/test_speaker_recovery.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["click_blocks", "longest_click", "tone_max_step"]


def tone_max_step(frequency: float, amplitude: float, rate: int = 48000) -> float:
    """The largest step between two samples of a sine (full scale 1): its slope's peak."""
    return float(2 * np.pi * frequency * amplitude / rate)


def click_blocks(
    samples: np.ndarray[Any, Any], max_step: float, *, rate: int = 48000, margin: float = 3.0
) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """One flag per 10 ms block: it holds a jump above ``max_step * margin``."""
    x = np.asarray(samples, dtype=np.float64)
    if x.dtype.kind in "iu" or np.abs(x).max(initial=0.0) > 1.0:
        x = x / 32768.0
    jumps = np.zeros(len(x), dtype=bool)
    jumps[1:] = np.abs(np.diff(x)) > max_step * margin
    block = rate // 100
    whole = len(x) // block * block
    return np.asarray(jumps[:whole].reshape(-1, block).any(axis=1), dtype=bool)


def longest_click(
    samples: np.ndarray[Any, Any], max_step: float, *, rate: int = 48000, margin: float = 3.0
) -> float:
    """Seconds of the longest run of consecutive click blocks (0: no click at all)."""
    flags = click_blocks(samples, max_step, rate=rate, margin=margin)
    longest = run = 0
    for flag in flags:
        run = run + 1 if flag else 0
        longest = max(longest, run)
    return longest / 100
