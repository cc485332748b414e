"""``benchmarks/RESULTS.md`` and its chart, written from a saved ``results.json`` (a real run,
``tests/fixtures/bench-results.json``): no measuring here."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from benchmarks import markdown
from benchmarks.stats import percentile

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "bench-results.json"


@pytest.fixture
def document() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(FIXTURE.read_text(encoding="utf-8"))
    return loaded


def _tier_lines(text: str) -> dict[str, list[str]]:
    block = text.split(markdown.TIERS_START, 1)[1].split(markdown.TIERS_END, 1)[0]
    rows = block.strip().splitlines()[2:]
    return {row.split("|")[1].strip(): [c.strip() for c in row.split("|")[2:-1]] for row in rows}


def test_the_report_says_where_and_how_the_numbers_were_taken(document: dict[str, Any]) -> None:
    text = markdown.render(document)
    env = document["environment"]
    assert f"| CPUs | {env['cpus']} |" in text
    assert f"| Python | {env['python']} |" in text
    assert env["platform"] in text
    assert "python -m benchmarks" in text
    assert "python -m benchmarks.markdown benchmarks/results.json" in text
    for key in document["figures"]:
        assert f"`python -m benchmarks --only {key}`" in text


def test_every_tier_has_n_median_and_p90_from_its_samples(document: dict[str, Any]) -> None:
    rows = _tier_lines(markdown.render(document))
    assert list(rows) == [
        "socket tier",
        "media tier: uplink (ASR)",
        "media tier: downlink (STV)",
        "cold tier",
        "detection: dead downlink",
        "detection: silently dead socket",
    ]
    socket = document["figures"]["recovery"]["samples_wall_ms"]
    _, _, n, median, p90, fell_back = rows["socket tier"]
    assert n == f"{len(socket)} of {document['figures']['recovery']['drops']}"
    assert median == markdown._duration(percentile(socket, 50.0))
    assert p90 == markdown._duration(percentile(socket, 90.0))
    assert fell_back == str(len(document["figures"]["recovery"]["fallbacks"]))
    cold = document["figures"]["resilience"]["rounds"]["cold"]["samples_ms"]["reconnected"]
    assert rows["cold tier"][3] == markdown._duration(percentile(cold, 50.0))


def test_rounds_that_fell_back_are_counted_and_listed(document: dict[str, Any]) -> None:
    changed = copy.deepcopy(document)
    rounds = changed["figures"]["resilience"]["rounds"]
    rounds["asr"]["fallbacks"] = ["asr: escalated to {'tier': 'cold'}"]
    text = markdown.render(changed)
    assert _tier_lines(text)["media tier: uplink (ASR)"][-1] == "1"
    assert "- media tier: uplink (ASR): asr: escalated to {'tier': 'cold'}" in text
    part_rows = re.findall(r"^\| asr \| (\d+) \| (\d+) \| (\d+) \|", text, re.MULTILINE)
    assert part_rows and part_rows[0][2] == "1"


def test_an_asr_only_run_reports_its_tier(document: dict[str, Any]) -> None:
    asr = document["figures"]["resilience"]["rounds"]["asr"]
    only = {
        "environment": document["environment"],
        "total_seconds": 30.0,
        "figures": {"asr": {"title": "ASR", "samples_ms": asr["samples_ms"], "fallbacks": []}},
        "table": [],
    }
    assert [t.key for t in markdown.tiers(only)] == ["asr"]


def test_write_draws_the_chart_beside_the_report(document: dict[str, Any], tmp_path: Path) -> None:
    report, chart = markdown.write(document, tmp_path / "RESULTS.md", tmp_path / "tiers.png")
    assert chart is not None
    assert chart.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert "![Recovery durations per tier](tiers.png)" in report.read_text(encoding="utf-8")


def test_the_command_line_rewrites_the_report_from_saved_results(tmp_path: Path) -> None:
    out = tmp_path / "R.md"
    chart = tmp_path / "c.png"
    assert markdown.main([str(FIXTURE), "--output", str(out), "--chart", str(chart)]) == 0
    assert out.read_text(encoding="utf-8").startswith("# Benchmark results\n")
    assert chart.exists()


def test_the_uplink_figure_adds_its_silent_death_rows_to_the_tier_table(
    document: dict[str, Any],
) -> None:
    """Issue 17: the uplink figures sit beside the other tiers (a detection + recovery, not
    charted with the recovery durations)."""
    flowing = {"samples_ms": {"flowing": [2200.0, 2100.0, 2300.0]}, "fallbacks": ["x"]}
    with_uplink = copy.deepcopy(document)
    with_uplink["figures"]["uplink"] = {
        "title": "uplink",
        "first_report": flowing,
        "after_recovery": flowing,
        "slow_reports": flowing,
    }
    found = {t.key: t for t in markdown.tiers(with_uplink)}
    keys = ["uplink_first_report", "uplink_after_recovery", "uplink_slow_reports"]
    assert all(key in found for key in keys)
    tier = found["uplink_slow_reports"]
    assert tier.median() == 2200.0 and tier.fell_back == ["x"] and not tier.recovery
    assert "uplink_first_report" not in {t.key for t in markdown.tiers(document)}
