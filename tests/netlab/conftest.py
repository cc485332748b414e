"""The network lab's tests need Linux, root and the ip/tc/nft tools (the Makefile's
``netlab-tools`` installs the tools as root). Without them every lab test fails with what is
missing and its fix: a skip would let a machine without the lab report it as passing. A
developer who cannot run as root opts out explicitly with ``AVATAR_SDK_NETLAB=off`` (the
tests are then skipped, saying why)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from avatar_sdk.testing.netlab import NetworkLab, requirements
from benchmarks.netlab_relay_scenario import FAULTS, RelayFigures
from benchmarks.netlab_scenarios import Figures

OPT_OUT = "AVATAR_SDK_NETLAB"


@pytest.fixture(autouse=True)
def _lab_available() -> None:
    problem = requirements()
    if problem is None:
        return
    if os.environ.get(OPT_OUT) == "off":
        pytest.skip(f"{OPT_OUT}=off: {problem}")
    pytest.fail(f"{problem}\n(or opt out of the lab's tests with {OPT_OUT}=off)", pytrace=False)


@pytest_asyncio.fixture
async def lab() -> AsyncIterator[NetworkLab]:
    async with NetworkLab() as opened:
        yield opened


def show(figures: Figures) -> Figures:
    """Print a scenario's figures (detection, recovery, frames, turns) in the test output."""
    print(figures.line())
    return figures


def no_turn_lost(f: Figures) -> None:
    """Every turn answered once, no error, still connected, nothing leaked."""
    assert f.errors == []
    assert f.turns_answered == f.turns_sent >= 2
    assert f.turns_duplicated == 0
    assert f.final_state == "connected"
    assert f.leaks == []


def show_relay(figures: RelayFigures) -> RelayFigures:
    """Print a relay run's figures (connect, recoveries, allocations) in the test output."""
    print(figures.line())
    return figures


def relay_survived(f: RelayFigures) -> None:
    """Connected, every turn answered, every fault recovered from with media flowing both
    ways again (counted at the SDK and at the staging), nothing leaked."""
    assert f.error is None
    assert f.connect is not None and f.first_media is not None
    assert set(f.recovery) == set(f.media) == {name for name, *_ in FAULTS}
    assert f.turns_answered == f.turns_sent == 1 + len(FAULTS)
    assert f.sdk_frames > 0 and f.staging_uplink_frames > 0 and f.staging_video_frames > 0
    assert "media_recovering:asr" in f.events and "media_recovering:stv" in f.events
    assert f.final_state == "connected"
    assert f.leaks == []
