"""A session in a fresh interpreter, for the "costs nothing without OpenTelemetry" tests (not a
test module).

``python -m tests.integration._telemetry_child MODE``: it starts its own ``StagingServer``,
runs a session through a greeting and one turn, then prints one JSON line of facts.

* ``blocked``: a ``sys.meta_path`` finder makes every ``opentelemetry`` import fail first,
  as if the extra were not installed; the session is built with ``instrument()`` tried.
* ``no_provider``: the API is importable and no provider is set; ``instrument()`` tried.
* ``imported``: the control: the telemetry's OpenTelemetry module is imported on purpose,
  so the check that ``opentelemetry`` stayed out of ``sys.modules`` must see it.
"""

from __future__ import annotations

import asyncio
import importlib.abc
import json
import sys
from collections.abc import Sequence
from typing import Any


class BlockOpenTelemetry(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Sequence[str] | None, target: Any = None) -> Any:
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)
        return None


async def main(mode: str) -> dict[str, Any]:
    if mode == "blocked":
        sys.meta_path.insert(0, BlockOpenTelemetry())
    from avatar_sdk import (  # noqa: PLC0415
        AvatarError,
        AvatarSession,
        SessionConfig,
        telemetry,
    )
    from avatar_sdk.testing import StagingServer  # noqa: PLC0415

    facts: dict[str, Any] = {"available": telemetry.available()}
    if mode == "imported":
        import avatar_sdk.telemetry.otel  # noqa: F401, PLC0415
    try:
        telemetry.Telemetry  # noqa: B018
        facts["telemetry_class"] = "loaded"
    except AvatarError as exc:
        facts["telemetry_class"] = f"{exc.code}: {exc}"
    async with StagingServer() as staging:
        session = AvatarSession(
            staging.url, staging.token, media=False, allow_insecure_transport=True,
            config=SessionConfig(agent_timeout=2.0),
        )  # fmt: skip
        facts["instrumented"] = telemetry.instrument(session)
        facts["taps_observed"] = bool(session.taps)
        await session.connect()
        await session.wait_for("agent_turn_ended", timeout=10)
        answered = session.expect("agent_turn_ended", timeout=10)
        await session.speak("hello")
        await answered
        await session.close()
        facts["state"] = session.state
    facts["opentelemetry_loaded"] = sorted(m for m in sys.modules if m.startswith("opentelemetry"))[
        :3
    ]
    return facts


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1]))), flush=True)
