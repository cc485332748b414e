"""Talk to the avatar with your microphone; hear nothing, read everything (captions).

Needs the ``mic`` extra (PortAudio through sounddevice) and a real input device, so the
test suite does not run it::

    pip install 'avatar-sdk[mic]'
    AVATAR_URL=https://... AVATAR_TOKEN=... python examples/microphone.py [DEVICE]

Without AVATAR_URL it talks to the embedded staging backend (which receives your audio but
has no speech recognizer: type lines instead, they are sent as text turns). DEVICE is a
sounddevice index or a name substring (``python -m sounddevice`` lists them). Ctrl-C ends
the conversation (and completes its thread).
"""

from __future__ import annotations

import asyncio
import os
import sys

from avatar_sdk import AvatarSession, Event
from avatar_sdk.media import MicrophoneSource
from avatar_sdk.testing import StagingServer


def show(session: AvatarSession) -> None:
    def caption(event: Event) -> None:
        print(f"avatar: {event.data['text']}", flush=True)

    def heard(event: Event) -> None:
        if event.data["final"]:
            print(f"you:    {event.data['text']}", flush=True)

    def trouble(event: Event) -> None:  # a denied, missing or busy device: text still works
        print(f"[microphone: {event.data['code']}] {event.data['message']}", flush=True)

    session.on("caption", caption)
    session.on("user_transcription", heard)
    session.on("error", trouble)


async def typed_turns(session: AvatarSession) -> None:
    """Lines typed on stdin are sent as text turns (until end of input)."""
    loop = asyncio.get_running_loop()
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        if line.strip():
            await session.speak(line.strip())


async def main(device: str | None) -> None:
    microphone = MicrophoneSource(int(device) if device and device.isdigit() else device)
    url, token = os.environ.get("AVATAR_URL"), os.environ.get("AVATAR_TOKEN")
    if url and token:
        async with AvatarSession(url, token, audio=microphone, video=False) as session:
            show(session)
            await typed_turns(session)
        return
    async with StagingServer() as staging:
        session = AvatarSession(
            staging.url, staging.token, audio=microphone, video=False,
            allow_insecure_transport=True,
        )  # fmt: skip
        show(session)
        async with session:
            print("speak, or type a line (Ctrl-D or Ctrl-C to end)", flush=True)
            await typed_turns(session)


if __name__ == "__main__":
    try:
        asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else None))
    except KeyboardInterrupt:
        print("bye")
