"""Soak: a 10-minute audio+video conversation against a staging cap of 60 s, so about ten
renewals, a turn every few seconds (issue 19's target; ``make soak``). The scaled version
runs in ``make test``: ``tests/integration/test_renewal_media.py``."""

from __future__ import annotations

import os
import statistics

import pytest

from avatar_sdk import RenewalPolicy, SessionConfig
from avatar_sdk.testing import StagingServer
from avatar_sdk.testing.leaks import LeakCheck
from avatar_sdk.testing.long_conversation import run_long_conversation

from ..integration.conftest import HANG_GUARD, until
from ..integration.test_renewal_media import check_long_run

pytestmark = pytest.mark.slow

#: Seconds of conversation (``AVATAR_SOAK_RENEWAL_SECONDS`` shortens it for a quick look).
DURATION = float(os.environ.get("AVATAR_SOAK_RENEWAL_SECONDS", "600"))
CAP = 60.0


async def test_ten_minutes_through_a_sixty_second_cap() -> None:
    async with StagingServer() as staging:
        check = LeakCheck()
        run = await run_long_conversation(
            staging,
            duration=DURATION,
            cap=CAP,
            warning=15.0,  # the staging default for this cap: a quarter of it
            policy=RenewalPolicy(lead_time=12.0),  # renewed at about 48 s of 60
            turn_every=4.0,
            config=SessionConfig(),
        )
        gaps = run.gaps
        print(
            f"\nrenewal soak: {len(run.asked)} turns, {len(run.renewed)} renewals, gap median"
            f" {statistics.median(gaps) * 1000:.1f} ms, max {max(gaps) * 1000:.1f} ms"
            if gaps
            else "\nrenewal soak: no gaps"
        )
        check_long_run(run, min_renewals=int(DURATION // CAP) - 1)
        assert statistics.median(gaps) < 0.1  # make-before-break: a pointer change
        assert staging.expired_sids == []
        assert await until(lambda: not staging.live_sids, HANG_GUARD)
        media = staging.media
        assert await until(lambda: media.whep_deletes == media.whep_posts, HANG_GUARD)
        assert await until(lambda: not media.asr_peers, HANG_GUARD)
        assert await check.settle(HANG_GUARD) == []
