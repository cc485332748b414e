"""Figure ``scripted``: ``ScriptedAvatarSession.say`` → the avatar's first voiced frame.

One scripted session against the staging backend over loopback (real HTTP, real WebRTC).
``SAYS`` says of a pre-encoded 0.3 s mp3 tone, one after the other (each waits for the
previous to finish, so none queues): per say, from just before ``say()`` to ``accepted``
(the server's answer) and to ``started``, the arrival of the first downlink audio frame
whose level counts as voice (the session's own onset detector, on the system clock). The
mp3 is encoded once beforehand and its duration given, so the figure is the protocol's and
the media path's latency, not PyAV's encoder. The staging voice track sends 20 ms frames
and aiortc's jitter buffer holds a few: most of the figure is that media path.
"""

from __future__ import annotations

import asyncio

from avatar_sdk.scripted import ScriptedAvatarSession, ScriptedConfig, pcm_tone
from avatar_sdk.scripted.audio import encode_mp3
from avatar_sdk.testing import StagingServer

from .stats import FigureResult, Row, Summary, Target

TITLE = "scripted: say() -> first voiced avatar frame (loopback)"
SAYS = 20
#: Information only: a say heard within a third of a second on loopback.
ONSET_TARGET = Target("<", 300.0, "ms")


async def _run(says: int) -> FigureResult:
    result = FigureResult("scripted", TITLE)
    mp3 = encode_mp3(pcm_tone(440, 0.3), 48_000)
    accepted: list[float] = []
    onset: list[float] = []
    missed = 0
    async with StagingServer() as staging:
        session = ScriptedAvatarSession(
            staging.agentic_url,
            staging.admin_token,
            staging.visual_id,
            allow_insecure_transport=True,
            config=ScriptedConfig(),
        )
        async with session:
            for _ in range(says):
                handle = await session.say(mp3, 0.3)
                started = await handle.started
                await handle
                accepted.append(handle.accepted.result() - handle.called_at)
                if started is None:
                    missed += 1
                else:
                    onset.append(started - handle.called_at)
    acc = Summary.of(accepted).scaled(1000.0)
    result.rows.append(Row.of("say -> accepted (HTTP answer)", acc, "ms"))
    if onset:
        first = Summary.of(onset).scaled(1000.0)
        result.rows.append(Row.of("say -> first voiced frame", first, "ms", ONSET_TARGET))
        result.data["first_voiced_frame"] = first.as_json("ms")
    result.data.update({"says": says, "missed": missed, "accepted": acc.as_json("ms")})
    result.notes.append(
        f"{says} says of a 0.3 s mp3 tone, one at a time; {missed} without an observed onset."
    )
    return result


def run(says: int = SAYS) -> FigureResult:
    """Run the scripted figure in its own event loop."""
    return asyncio.run(_run(says))
