"""The fault tour, in a few lines of library code: break the connection in each way the
SDK recovers from, and print which tier recovered it and how long that took.

Run it as is against the embedded staging backend (``--media`` adds the WebRTC faults)::

    .venv/bin/python examples/fault_tour.py [--media]

``avatar-sdk demo`` is the same tour with a live timeline.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from avatar_sdk import AvatarSession, SessionConfig
from avatar_sdk.media import ToneSource
from avatar_sdk.testing import StagingServer

Inject = Callable[[StagingServer], Awaitable[Any]]

#: (what breaks, how to break it, the event that proves the recovery, media only)
FAULTS: list[tuple[str, Inject, str, bool]] = [
    ("transport drop", lambda s: s.faults.drop_socket(), "reconnected", False),
    ("unrecoverable drop", lambda s: s.faults.drop_socket(recovery=False), "reconnected", False),
    (
        "agent restart",
        lambda s: s.faults.agent_crash(recoverable=True),
        "agent_speech_started",
        False,
    ),
    ("downlink ICE failure", lambda s: s.faults.ice_failure("stv"), "media_recovered", True),
    ("uplink ICE failure", lambda s: s.faults.ice_failure("asr"), "media_recovered", True),
]


async def tour(media: bool) -> None:
    async with StagingServer() as staging:
        session = AvatarSession(
            staging.url, staging.token, genie_url=staging.genie_url, media=media,
            audio=ToneSource() if media else None, allow_insecure_transport=True,
            config=SessionConfig(reconnect_window=5.0),
        )  # fmt: skip
        async with session:
            for label, inject, proof, needs_media in FAULTS:
                if needs_media and not media:
                    continue
                recovered = session.expect(proof, timeout=15)  # registered before the fault
                await inject(staging)
                if proof == "agent_speech_started":  # the restarted agent answers again
                    await session.speak("Are you back?")
                event = await recovered
                how = event.data.get("tier") or event.data.get("method") or "answered"
                took = event.data.get("duration")
                timing = f" in {1000 * took:.0f} ms" if took else ""
                print(f"{label:<22} recovered: {how}{timing}")
            answered = session.expect("agent_turn_ended", timeout=15)
            await session.speak("Still there?")
            await answered
            print(f"the conversation went on: reconnects {session.stats()['reconnects']}")


if __name__ == "__main__":
    asyncio.run(tour(media="--media" in sys.argv[1:]))
