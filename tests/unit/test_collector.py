"""CollectorFreeze: the sessions' graphs are frozen out of full collections once every
one has settled, and given back by unfreeze (issue 32, item 8)."""

from __future__ import annotations

import gc

from avatar_sdk.fleet.collector import CollectorFreeze
from avatar_sdk.fleet.plan import FleetPlan, SessionSpec


def test_frozen_once_every_member_settled_and_given_back() -> None:
    freeze = CollectorFreeze(expected=3)
    try:
        freeze.settled(0)
        freeze.settled(0)  # counted once
        freeze.settled(1)
        assert freeze.frozen == 0 and gc.get_freeze_count() == 0
        freeze.settled(2)
        assert freeze.frozen > 0 and gc.get_freeze_count() > 0
    finally:
        freeze.unfreeze()
    assert freeze.frozen == 0 and gc.get_freeze_count() == 0


def test_the_fleet_freezes_by_default() -> None:
    spec = SessionSpec("http://127.0.0.1:1", "t", allow_insecure_transport=True)
    plan = FleetPlan(scenario="x:y", session=spec)
    assert plan.freeze_gc is True
