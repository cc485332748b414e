"""Record the avatar's audio and video to a file while it answers a question.

The container follows the extension: ``.mp4`` (H.264 + AAC), ``.webm`` (VP8 + Opus),
``.wav`` (audio only). Run it as is against the embedded staging backend, whose avatar is
synthetic video and voice::

    .venv/bin/python examples/record_avatar.py avatar.mp4
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import av

from avatar_sdk import AvatarSession, Event
from avatar_sdk.media import record_avatar
from avatar_sdk.testing import StagingServer


async def record(session: AvatarSession, path: Path, question: str) -> None:
    """Record while the avatar answers ``question`` aloud (the file is complete on return)."""
    started, stopped = asyncio.Event(), asyncio.Event()

    def talking(event: Event) -> None:  # the avatar's voice, which outlasts its text turn
        if event.data["talking"]:
            started.set()
        elif started.is_set():
            stopped.set()

    unsubscribe = session.on("agent_talking", talking)  # subscribed before speaking
    try:
        async with record_avatar(session.avatar_audio, session.avatar_video, path):
            await session.speak(question)
            async with asyncio.timeout(30):
                await stopped.wait()
    finally:
        unsubscribe()


def describe(path: Path) -> str:
    with av.open(str(path)) as container:
        streams = ", ".join(f"{s.type} ({s.codec_context.name})" for s in container.streams)
        seconds = (container.duration or 0) / 1_000_000
    return f"{path}: {path.stat().st_size} bytes, {seconds:.1f} s, {streams}"


async def main(path: Path) -> None:
    async with StagingServer() as staging:
        session = AvatarSession(
            staging.url, staging.token, genie_url=staging.genie_url,
            allow_insecure_transport=True,  # media=True (the default): audio and video
        )  # fmt: skip
        greeting = session.expect("agent_turn_ended", timeout=30)
        async with session:
            await greeting
            await record(session, path, "Tell me about yourself.")
    print(describe(path))


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1] if len(sys.argv) > 1 else "avatar.mp4")))
