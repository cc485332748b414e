"""The avatar as the face of your own agent: it speaks the audio you give it.

Three "utterances" (tones standing in for your TTS output) are queued at once; the avatar
speaks them in order, and each ``say`` handle tells when its voice started and finished on
the downlink. A fourth, long one is cut by ``interrupt()``. Run it as is against the
embedded staging backend::

    .venv/bin/python examples/scripted_avatar.py

Against a real service set ``AGENTIC_URL``, ``ADMIN_TOKEN`` (an admin token, minted on
your server) and ``VISUAL_ID``.
"""

from __future__ import annotations

import asyncio
import os

from avatar_sdk import ScriptedAvatarSession
from avatar_sdk.scripted import pcm_tone
from avatar_sdk.testing import StagingServer


async def speak(avatar: ScriptedAvatarSession) -> None:
    t0 = asyncio.get_running_loop().time()
    handles = [await avatar.say(pcm_tone(f, 0.8), sample_rate=48_000) for f in (440, 550, 660)]
    for n, handle in enumerate(handles, 1):
        started = await handle.started
        result = await handle
        heard = f"{started - handle.called_at:.2f}s after say()" if started else "not heard"
        print(f"utterance {n}: voice {heard}, finished ({result.reason}) {result.at - t0:.2f}s in")
    long = await avatar.say(pcm_tone(330, 10.0), sample_rate=48_000)
    await long.started
    await avatar.interrupt()
    result = await long
    print(f"long utterance: {result.reason}, interrupted={result.interrupted}")


async def main() -> None:
    url = os.environ.get("AGENTIC_URL")
    if url:
        async with ScriptedAvatarSession(
            url, os.environ["ADMIN_TOKEN"], os.environ["VISUAL_ID"]
        ) as avatar:
            await speak(avatar)
        return
    async with (
        StagingServer() as staging,
        ScriptedAvatarSession(
            staging.agentic_url,
            staging.admin_token,
            staging.visual_id,
            allow_insecure_transport=True,  # the staging backend is plain http on loopback
        ) as avatar,
    ):
        await speak(avatar)


if __name__ == "__main__":
    asyncio.run(main())
