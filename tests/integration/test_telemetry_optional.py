"""Without the ``otel`` extra, or with no provider set, telemetry costs nothing: nothing from
OpenTelemetry is imported, nothing is attached to the session, and sessions run as always.
Each case runs a real session in a fresh interpreter (``_telemetry_child``); the control
case shows that the ``sys.modules`` check sees an import when there is one."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


async def _child(mode: str) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.integration._telemetry_child", mode,
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()[-2000:]
    facts: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return facts


async def test_without_the_extra_nothing_is_imported_and_the_session_runs() -> None:
    facts = await _child("blocked")
    assert facts["available"] is False
    assert facts["telemetry_class"].startswith("invalid_argument")
    assert "pip install 'avatar-sdk[otel]'" in facts["telemetry_class"]
    assert facts["instrumented"] is False
    assert facts["taps_observed"] is False
    assert facts["state"] == "ended"
    assert facts["opentelemetry_loaded"] == []


async def test_with_the_api_and_no_provider_nothing_is_attached() -> None:
    pytest.importorskip("opentelemetry")
    facts = await _child("no_provider")
    assert facts["available"] is True
    assert facts["instrumented"] is False  # no provider: nothing subscribed, nothing to cost
    assert facts["taps_observed"] is False
    assert facts["state"] == "ended"


async def test_the_import_check_sees_an_import() -> None:
    pytest.importorskip("opentelemetry")
    facts = await _child("imported")
    assert facts["opentelemetry_loaded"] != []  # the check above is not vacuous
