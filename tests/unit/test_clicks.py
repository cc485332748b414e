"""The click measure the speaker's recovery test relies on: it must see a planted burst."""

from __future__ import annotations

import numpy as np

from avatar_sdk.testing.clicks import longest_click, tone_max_step

RATE = 48000
STEP = tone_max_step(440, 0.3)


def _tone(seconds: float, phase: float = 0.0) -> np.ndarray:
    t = np.arange(round(seconds * RATE)) / RATE
    return 0.3 * np.sin(2 * np.pi * 440 * t + phase)


def test_a_clean_tone_and_its_abrupt_start_and_end_are_at_most_one_block() -> None:
    assert longest_click(_tone(1.0), STEP) == 0.0
    spoken = np.concatenate([np.zeros(4800), _tone(0.5), np.zeros(4800), _tone(0.3)])
    assert longest_click(spoken, STEP) <= 0.01
    int16 = (spoken * 32767).astype(np.int16)
    assert longest_click(int16, STEP) <= 0.01


def test_a_phase_jump_is_one_short_click() -> None:
    jumped = np.concatenate([_tone(0.5), _tone(0.5, phase=np.pi / 2)])
    assert 0.0 < longest_click(jumped, STEP) <= 0.01


def test_a_burst_of_garbage_is_as_long_as_it_lasts() -> None:
    noise = np.random.default_rng(1).uniform(-0.3, 0.3, round(0.05 * RATE))
    planted = np.concatenate([_tone(0.5), noise, _tone(0.5)])
    assert 0.05 <= longest_click(planted, STEP) <= 0.07
