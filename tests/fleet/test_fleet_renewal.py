"""A fleet run renews when its ``SessionSpec`` asks (issue 19) and reports the renewals and
their gaps. Inline engine, real StagingServer over loopback."""

from __future__ import annotations

from pathlib import Path

import pytest

from avatar_sdk import AvatarError, RenewalPolicy
from avatar_sdk.fleet import FleetPlan, SessionSpec, run_fleet
from avatar_sdk.fleet.report import summary_rows
from avatar_sdk.testing import StagingServer

from .conftest import by_kind, read_jsonl, spec_for

SCENARIOS = "tests.fleet.scenarios"


async def test_a_fleet_run_reports_its_renewals(staging: StagingServer, tmp_path: Path) -> None:
    spec = spec_for(staging, renewal={"lead_time": 5.0, "boundary_wait": 2.0})
    config = spec.session_config()
    assert config is not None and config.renewal == RenewalPolicy(lead_time=5.0, boundary_wait=2.0)
    plan = FleetPlan(f"{SCENARIOS}:renewed_once", spec, sessions=2, rate=50.0)
    jsonl = tmp_path / "run.jsonl"
    report = await run_fleet(plan, engine="inline", jsonl=jsonl)
    assert report.ok, report.stats
    renewals = by_kind(read_jsonl(jsonl), "renewal")
    assert len(renewals) == 2 and {r["strategy"] for r in renewals} == {"make_before_break"}
    stats = report.stats["renewals"]
    assert stats["count"] == 2 and stats["strategies"] == {"make_before_break": 2}
    labels = [row[0] for row in summary_rows(report.stats)]
    assert "renewals (make_before_break=2)" in labels
    assert report.stats["turns"] == {"ok": 4, "failed": 0}


def test_a_bad_renewal_field_fails_in_the_driver(staging: StagingServer) -> None:
    with pytest.raises(AvatarError):
        SessionSpec(staging.url, staging.token, renewal={"lead_tme": 5.0})
    with pytest.raises(AvatarError):
        SessionSpec(staging.url, staging.token, renewal={"lead_time": -1})
