"""A headless Q&A bot: ask the avatar questions as text, print what it says back.

Run it as is against the embedded staging backend::

    .venv/bin/python examples/qa_bot.py "What can you do?" "Thanks!"

or against a real backend: set AVATAR_URL and AVATAR_TOKEN (and AVATAR_GENIE_URL).
``ask()`` is the bot's one skill; ``examples/test_qa_bot.py`` tests it with the pytest
plugin's fixtures.
"""

from __future__ import annotations

import asyncio
import os
import sys

from avatar_sdk import AvatarSession, Event
from avatar_sdk.testing import StagingServer
from avatar_sdk.wire.segments import SPOKEN_TYPES


def spoken(event: Event) -> bool:
    """What the avatar says out loud, not its tool calls, tool responses or thinking."""
    return bool(event.data.get("spoken", event.data["type"] in SPOKEN_TYPES))


async def ask(session: AvatarSession, question: str, timeout: float = 30) -> str:
    """Speak ``question``; return the avatar's answer once its turn has ended."""
    words: list[str] = []
    unsubscribe = session.on(
        "agent_text", lambda e: words.append(e.data["content"]) if spoken(e) else None
    )
    try:
        answered = session.expect("agent_turn_ended", timeout=timeout)  # before speaking
        await session.speak(question)
        await answered
    finally:
        unsubscribe()
    return "".join(words).strip()


async def converse(session: AvatarSession, questions: list[str]) -> None:
    for question in questions:
        print("you:   ", question)
        print("avatar:", await ask(session, question))


async def main(questions: list[str]) -> None:
    url, token = os.environ.get("AVATAR_URL"), os.environ.get("AVATAR_TOKEN")
    if url and token:
        session = AvatarSession(
            url, token, genie_url=os.environ.get("AVATAR_GENIE_URL"), media=False
        )
        greeting = session.expect("agent_turn_ended", timeout=30)  # before connecting
        async with session:
            await greeting
            await converse(session, questions)
        return
    async with StagingServer() as staging:
        session = AvatarSession(
            staging.url, staging.token, genie_url=staging.genie_url, media=False,
            allow_insecure_transport=True,  # the staging backend is plain http on loopback
        )  # fmt: skip
        greeting = session.expect("agent_turn_ended", timeout=30)
        async with session:  # connects; leaving it closes and completes the thread
            await greeting
            await converse(session, questions)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:] or ["Hello!", "What can you do?"]))
