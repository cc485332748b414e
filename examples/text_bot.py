"""A headless text bot against the embedded staging backend (or a real one).

Run: ``.venv/bin/python examples/text_bot.py`` (staging), or set AVATAR_URL and AVATAR_TOKEN
to talk to a real backend over https.
"""

from __future__ import annotations

import asyncio
import os

from avatar_sdk import AvatarSession, Event
from avatar_sdk.testing import StagingServer


async def converse(session: AvatarSession, questions: list[str]) -> None:
    reply: list[str] = []

    def collect(event: Event) -> None:
        if event.data["type"] in ("text", "avatar", "avatar-filler"):
            reply.append(event.data["content"])

    session.on("agent_text", collect)
    await session.wait_for("agent_turn_ended", timeout=30)
    print("avatar:", "".join(reply).strip())
    for question in questions:
        reply.clear()
        print("you:   ", question)
        turn_ended = session.expect("agent_turn_ended", timeout=30)  # subscribed before speaking
        await session.speak(question)
        await turn_ended
        print("avatar:", "".join(reply).strip())


async def main() -> None:
    questions = ["Hello!", "What can you do?"]
    url, token = os.environ.get("AVATAR_URL"), os.environ.get("AVATAR_TOKEN")
    if url and token:
        async with AvatarSession(url, token, media=False) as session:
            await converse(session, questions)
        return
    async with (
        StagingServer() as staging,
        AvatarSession(
            staging.url, staging.token, media=False, allow_insecure_transport=True
        ) as session,
    ):
        await converse(session, questions)


if __name__ == "__main__":
    asyncio.run(main())
