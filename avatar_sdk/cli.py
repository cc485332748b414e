"""``avatar-sdk``: demo, diagram, and a standalone staging backend."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from typing import Any

from .config import SessionConfig
from .errors import AvatarError
from .events import Event
from .machine import mermaid
from .media import ToneSource
from .session import AvatarSession
from .testing import StagingServer
from .testing.control import CONTROL_PREFIX

_QUIET = {"agent_text", "caption"}


def _timeline(start: float) -> Any:
    def show(event: Event) -> None:
        if event.name in _QUIET:
            return
        data = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in event.data.items()}
        elapsed = 1000 * (event.at - start)
        print(f"  {elapsed:8.1f} ms  {event.name:<22} {json.dumps(data, default=str)}")

    return show


async def demo(media: bool = True) -> int:
    """Embedded staging backend + a live session (audio+video by default) through faults."""
    async with StagingServer() as staging:
        print(f"staging backend on {staging.url}\n")
        session = AvatarSession(
            staging.url,
            staging.token,
            genie_url=staging.genie_url,
            audio=ToneSource(frequency=300.0) if media else None,
            media=media,
            allow_insecure_transport=True,
            config=SessionConfig(reconnect_window=5.0),
        )
        start = time.monotonic()
        session.on("*", _timeline(start))
        spoken: list[str] = []
        session.on(
            "agent_text",
            lambda e: spoken.append(e.data["content"]) if e.data["type"] == "avatar" else None,
        )
        try:
            await session.connect()
            await session.wait_for("agent_turn_ended", 5)
            print(f"\n  avatar: {''.join(spoken).strip()}\n")
            for question in ("What can you do?", "And after a network blip?"):
                spoken.clear()
                if question.startswith("And"):
                    print("  -- injecting a recoverable transport drop --")
                    waiter = asyncio.ensure_future(session.wait_for("reconnected", 10))
                    await staging.faults.drop_socket()
                    await waiter
                    print("  -- injecting a drop the server refuses to recover (cold reconnect) --")
                    waiter = asyncio.ensure_future(session.wait_for("reconnected", 10))
                    await staging.faults.drop_socket(recovery=False)
                    await waiter
                    if media:
                        print("  -- injecting a downlink ICE failure (WHEP re-subscribe) --")
                        waiter = asyncio.ensure_future(session.wait_for("media_recovered", 10))
                        await staging.faults.ice_failure("stv")
                        await waiter
                        print("  -- injecting an uplink ICE failure (renegotiation) --")
                        waiter = asyncio.ensure_future(session.wait_for("media_recovered", 10))
                        await staging.faults.ice_failure("asr")
                        await waiter
                print(f"\n  user:   {question}")
                await session.speak(question)
                await session.wait_for("agent_turn_ended", 5)
                print(f"  avatar: {''.join(spoken).strip()}\n")
            uplink = 0
            if media:
                await asyncio.sleep(1.0)  # let a second of media flow on the rebuilt session
                uplink = staging.media.asr_stats(staging.live_sids[0]).frames
        except AvatarError as error:
            print(f"demo failed: {error}", file=sys.stderr)
            return 1
        finally:
            await session.close()
        stats = session.stats()
        joins = len(staging.received_events("join"))
        if media:
            video, audio = session._outputs.get("video"), session._outputs["audio"]
            print(
                f"\nmedia: avatar video frames received={video.received if video else 0}, "
                f"avatar audio frames received={audio.received}, "
                f"WHEP subscribes={staging.media.whep_posts} deletes={staging.media.whep_deletes}"
                + f", uplink audio frames at the backend (last server session)={uplink}"
            )
        recovery_ms = {
            tier: [round(1000 * d, 1) for d in durations]
            for tier, durations in stats["recovery_durations"].items()
        }
        print(
            f"\nsummary: state={session.state} thread={session.thread_id} joins={joins} "
            f"reconnects={stats['reconnects']} "
            f"recovery_ms={recovery_ms}"
        )
        return 0


async def serve(host: str, port: int, token: str | None, advertise_host: str | None = None) -> int:
    """Run the staging backend until interrupted, with its HTTP control API
    (:mod:`avatar_sdk.testing.control`, documented in ``docs/testing.md``)."""
    staging = StagingServer(
        host=host, port=port, token=token, advertise_host=advertise_host, control_api=True
    )
    await staging.start()
    url = staging.public_url
    print(json.dumps({"url": url, "genie_url": f"{url}/genie", "token": staging.token}))
    print(
        f"faults: POST {url}{CONTROL_PREFIX}/faults/<name>, brain scripts: POST "
        f"{url}{CONTROL_PREFIX}/brain/<name>, with JSON keyword arguments",
        flush=True,
    )
    try:
        await asyncio.Event().wait()
    finally:
        await staging.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="avatar-sdk", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo_p = sub.add_parser(
        "demo", help="embedded staging backend + a live session surviving faults"
    )
    demo_p.add_argument("--no-media", action="store_true", help="control plane only (text)")
    sub.add_parser("diagram", help="print the session state machine as Mermaid")
    staging = sub.add_parser("staging", help="the staging backend")
    staging_sub = staging.add_subparsers(dest="staging_command", required=True)
    serve_p = staging_sub.add_parser("serve", help="run it standalone")
    serve_p.add_argument("--host", default="127.0.0.1")
    serve_p.add_argument("--port", type=int, default=0)
    serve_p.add_argument("--token", default=None)
    serve_p.add_argument(
        "--advertise-host",
        default=None,
        metavar="NAME",
        help="host name in the URLs handed to clients (the WHEP URL), instead of --host",
    )
    args = parser.parse_args(argv)
    if args.command == "diagram":
        print(mermaid(), end="")
        return 0
    if args.command == "demo":
        return asyncio.run(demo(media=not args.no_media))
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(serve(args.host, args.port, args.token, args.advertise_host))
    return 0


if __name__ == "__main__":
    sys.exit(main())
