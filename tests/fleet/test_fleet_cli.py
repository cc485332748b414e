"""``avatar-sdk fleet`` end to end: the staging backend in a child process, a scripted run,
the summary, the JSONL and the HTML chart; exit statuses for failures and usage errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from avatar_sdk._cli.main import main

SCRIPT = """\
steps:
  - say: Hello!
  - say: What can you do?
"""


def test_fleet_against_staging_writes_summary_jsonl_and_chart(tmp_path: Path) -> None:
    script = tmp_path / "talk.yaml"
    script.write_text(SCRIPT, encoding="utf-8")
    jsonl, page = tmp_path / "out.jsonl", tmp_path / "out.html"
    result = CliRunner().invoke(
        main,
        ["fleet", str(script), "--staging", "-n", "3", "--rate", "30", "--engine", "inline",
         "--set", "close_timeout=1", "--jsonl", str(jsonl), "--html", str(page)],
    )  # fmt: skip

    assert result.exit_code == 0, result.output
    assert "fleet summary" in result.output
    assert re.search(r"^sessions ok / failed +3 / 0$", result.output, re.MULTILINE)
    assert re.search(r"^reply: generated, turn 1 +3 ", result.output, re.MULTILINE)
    assert "started 3/3" in result.output  # the final progress line
    kinds = [json.loads(line)["kind"] for line in jsonl.read_text().splitlines()]
    assert kinds.count("turn") == 6 and kinds.count("session_finished") == 3
    html = page.read_text(encoding="utf-8")
    assert "<svg" in html and 'data-series="text_p50"' in html and "<script" not in html


def test_fleet_exit_status_is_1_when_a_session_fails() -> None:
    result = CliRunner().invoke(
        main,
        ["fleet", "tests.fleet.scenarios:raises_on_one", "--staging", "-n", "2",
         "--rate", "30", "--engine", "inline"],
    )  # fmt: skip

    assert result.exit_code == 1, result.output
    assert "scenario_error=1" in result.output
    assert "1 of 2 session(s) failed" in result.output


def test_fleet_usage_errors_exit_2(tmp_path: Path) -> None:
    runner = CliRunner()
    neither = runner.invoke(main, ["fleet", "tests.fleet.scenarios:one_turn"])
    assert neither.exit_code == 2 and "--staging or --url" in neither.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("steps:\n  - sing: la\n", encoding="utf-8")
    unknown_step = runner.invoke(main, ["fleet", str(bad), "--staging", "--engine", "inline"])
    assert unknown_step.exit_code == 2
    assert "bad.yaml: steps[0]" in unknown_step.output


def test_a_scenario_that_fails_to_import_exits_2(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('boom at import')\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["fleet", str(broken), "--staging", "--engine", "inline"])

    assert result.exit_code == 2, result.output
    assert "RuntimeError: boom at import" in result.output
    assert "Traceback" not in result.output


def test_fleet_http_url_without_insecure_is_a_usage_error_naming_the_flag() -> None:
    result = CliRunner().invoke(
        main,
        ["fleet", "tests.fleet.scenarios:one_turn", "--url", "http://127.0.0.1:9", "-n", "1",
         "--engine", "inline"],
        env={"AVATAR_TOKEN": "t"},
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("avatar-sdk:")]
    assert len(lines) == 1 and "pass --insecure" in lines[0], result.stderr
    assert "allow_insecure_transport" not in result.output
