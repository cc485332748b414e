"""The telemetry's names: one mapping module, every name documented on the observability
page, the GenAI convention names where the conventions define them, and the fleet's
telemetry options checked and picklable. No OpenTelemetry needed."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import pytest

from avatar_sdk.errors import AvatarError
from avatar_sdk.fleet import FleetPlan, FleetTelemetry, SessionSpec
from avatar_sdk.telemetry import names

PAGE = Path(__file__).resolve().parents[2] / "docs" / "observability.md"
PREFIXES = ("gen_ai.", "avatar.", "error.", "server.", "invoke_agent", "execute_tool")


def written_names() -> set[str]:
    """Every span, attribute, event and metric name the mapping module defines."""
    return {
        value
        for key, value in vars(names).items()
        if key.isupper() and isinstance(value, str) and value.startswith(PREFIXES)
    }


def undocumented(page: str) -> list[str]:
    fenced = re.findall(r"^```.*?^```", page, flags=re.M | re.S)
    inline = re.sub(r"^```.*?^```", "", page, flags=re.M | re.S)
    code = set(re.findall(r"`([^`\n]+)`", inline)) | {w for b in fenced for w in b.split()}
    spans = {w for c in code for w in c.split()}  # "execute_tool <name>" and the like
    return sorted(n for n in written_names() if n not in code and n not in spans)


def test_every_name_is_documented() -> None:
    assert undocumented(PAGE.read_text(encoding="utf-8")) == []


def test_the_check_catches_an_undocumented_name() -> None:
    page = PAGE.read_text(encoding="utf-8").replace("`avatar.recovery.attempts`", "attempts")
    assert undocumented(page) == ["avatar.recovery.attempts"]


def test_convention_names_and_version() -> None:
    assert names.GEN_AI_CONVERSATION_ID == "gen_ai.conversation.id"
    assert names.GEN_AI_OPERATION_NAME == "gen_ai.operation.name"
    assert names.ERROR_TYPE == "error.type"
    assert names.SERVER_ADDRESS == "server.address"
    assert names.SCHEMA_URL.endswith(f"/schemas/{names.SEMCONV_VERSION}")
    assert names.SEMCONV_VERSION in PAGE.read_text(encoding="utf-8")
    # ours are all under avatar.*; seconds for every histogram
    ours = written_names() - {
        v for k, v in vars(names).items() if k.startswith(("GEN_AI", "ERROR", "SERVER"))
    }
    assert all(n.startswith(("avatar.", "invoke_agent", "execute_tool")) for n in ours)
    assert {unit for unit, _ in names.HISTOGRAMS.values()} == {"s"}


def test_fleet_telemetry_is_checked_and_picklable() -> None:
    spec = SessionSpec("https://avatar.example", "tok")
    telemetry = FleetTelemetry(setup="pkg.mod:setup", options={"endpoint": "http://c:4318"})
    plan = FleetPlan("pkg.mod:scenario", spec, telemetry=telemetry)
    assert pickle.loads(pickle.dumps(plan)).telemetry == telemetry
    with pytest.raises(AvatarError, match="options"):
        FleetTelemetry(options={"port": 4318})  # type: ignore[dict-item]
    with pytest.raises(AvatarError, match="setup"):
        FleetTelemetry(setup="  ")
    with pytest.raises(AvatarError, match="telemetry"):
        FleetPlan("pkg.mod:scenario", spec, telemetry={"setup": "x"})  # type: ignore[arg-type]
