"""Fleet tests: sessions against a real StagingServer (with its control API) on loopback."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest_asyncio

from avatar_sdk.fleet import SessionSpec
from avatar_sdk.testing import StagingServer

# Ray 2.5x clusters authenticate with a token per local instance, and Ray reads the mode
# once per process: the tests' loopback instances (the engine's own, one in another process
# joined by address, one the test starts) all go without, set before any of them starts.
os.environ["RAY_AUTH_MODE"] = "disabled"

#: Shrunk timeouts: behaviour is the same, tests finish fast.
FAST: dict[str, Any] = {"close_timeout": 1.0, "reconnect_window": 5.0, "turn_confirm_timeout": 0.5}


@pytest_asyncio.fixture
async def staging() -> AsyncIterator[StagingServer]:
    async with StagingServer(control_api=True) as server:
        yield server


def spec_for(staging: StagingServer, **options: Any) -> SessionSpec:
    options.setdefault("config", FAST)
    return SessionSpec(
        staging.url,
        staging.token,
        genie_url=staging.genie_url,
        allow_insecure_transport=True,
        control_url=staging.public_url,
        **options,
    )


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def by_kind(items: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [m for m in items if m["kind"] == kind]


class Collector:
    """Keeps every measurement of a run and sets ``turns_seen`` once ``turns`` turn
    measurements have arrived (a test then acts mid-run, e.g. cancels it)."""

    def __init__(self, turns: int) -> None:
        self.items: list[dict[str, Any]] = []
        self.turns_seen = asyncio.Event()
        self._turns = turns

    def add(self, item: dict[str, Any]) -> None:
        self.items.append(item)
        if len(by_kind(self.items, "turn")) >= self._turns:
            self.turns_seen.set()
