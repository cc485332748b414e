"""A program that loses its backend under a connected session, then leaves at once (not a
test module): ``python -m tests.integration._killed_backend_child [media]``.

It runs a staging backend in-process, connects, asks a question the backend never answers,
stops the backend (for the client: the server killed), and once the pending ``ask()``
fails (the session gave up) leaves ``async with`` and the program. It prints one line,
``ENDED-BEFORE-EXIT <bool>``: whether the ``ended`` event was delivered before ``async
with`` returned. Anything else on stdout or stderr (aiohttp's ``Unclosed client session``)
is what the test catches.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys

from avatar_sdk import AvatarError, AvatarSession, RetryPolicy, SessionConfig
from avatar_sdk.testing import StagingServer

CONFIG = SessionConfig(
    overall_connect_timeout=5.0,
    server_connect_timeout=0.5,
    join_room_timeout=0.5,
    join_complete_timeout=0.5,
    agent_timeout=0.5,
    reconnect_window=0.5,
    close_timeout=1.0,
    asr_timeout=5.0,
    cold_reconnect=RetryPolicy(max_attempts=1, min_span=0.0),
)


async def main(media: bool) -> None:
    staging = StagingServer()
    await staging.start()
    ended: list[str] = []
    session = AvatarSession(
        staging.url,
        staging.token,
        media=media,
        allow_insecure_transport=True,
        genie_url=staging.genie_url,
        config=CONFIG,
    )
    session.on("ended", lambda event: ended.append(str(event.data.get("reason"))))
    async with session:
        staging.brain.stall(60.0)
        asking = asyncio.ensure_future(session.ask("are you there?", timeout=60))
        await asyncio.sleep(0.2)
        await staging.stop()  # the backend is gone: the session gives up
        with contextlib.suppress(AvatarError):  # the session gave up: it fails
            await asking
    print(f"ENDED-BEFORE-EXIT {bool(ended)}", flush=True)


if __name__ == "__main__":
    asyncio.run(main("media" in sys.argv[1:]))
