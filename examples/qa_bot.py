"""A headless Q&A bot: ask the avatar questions as text, print what it says back.

Run it as is against the embedded staging backend::

    .venv/bin/python examples/qa_bot.py "What can you do?" "Thanks!"

or against a real backend: set AVATAR_URL and AVATAR_TOKEN (and AVATAR_GENIE_URL).
``converse()`` is the bot's one skill, built on ``session.ask()`` (which waits out the
greeting and any answer still being said, then returns the reply to that question);
``examples/test_qa_bot.py`` tests it with the pytest plugin's fixtures.
"""

from __future__ import annotations

import asyncio
import os
import sys

from avatar_sdk import AvatarSession
from avatar_sdk.testing import StagingServer


async def converse(session: AvatarSession, questions: list[str]) -> list[str]:
    """Ask each question in turn; print and return the avatar's answers."""
    answers: list[str] = []
    for question in questions:
        print("you:   ", question)
        reply = await session.ask(question, timeout=30)  # the reply to this question
        print("avatar:", reply.text)  # its spoken text only: no tool calls, no thinking
        answers.append(reply.text)
    return answers


async def main(questions: list[str]) -> None:
    url, token = os.environ.get("AVATAR_URL"), os.environ.get("AVATAR_TOKEN")
    if url and token:
        session = AvatarSession(
            url, token, genie_url=os.environ.get("AVATAR_GENIE_URL"), media=False
        )
        async with session:
            await converse(session, questions)
        return
    async with StagingServer() as staging:
        session = AvatarSession(
            staging.url, staging.token, genie_url=staging.genie_url, media=False,
            allow_insecure_transport=True,  # the staging backend is plain http on loopback
        )  # fmt: skip
        async with session:  # connects; leaving it closes and completes the thread
            await converse(session, questions)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:] or ["Hello!", "What can you do?"]))
