"""A real AvatarSession in a child process, for the SIGTERM test (not a test module).

``python -m tests.integration._session_child``; the staging URL, genie URL and token come
from ``AVATAR_TEST_URL`` / ``AVATAR_TEST_GENIE_URL`` / ``AVATAR_TEST_TOKEN``. It connects
with ``handle_signals=True``, waits for the greeting (so the thread is known), prints
``READY <thread_id>`` and waits to be signalled.
"""

from __future__ import annotations

import asyncio
import os

from avatar_sdk import AvatarSession, SessionConfig


async def main() -> None:
    session = AvatarSession(
        os.environ["AVATAR_TEST_URL"],
        os.environ["AVATAR_TEST_TOKEN"],
        genie_url=os.environ["AVATAR_TEST_GENIE_URL"],
        media=False,
        allow_insecure_transport=True,
        config=SessionConfig(handle_signals=True),
    )
    await session.connect()
    await session.wait_for("agent_turn_ended", timeout=10)
    print(f"READY {session.thread_id}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
