"""``avatar-sdk fleet``: run a scenario as many sessions, show live progress, print the
summary, write the JSON Lines and the HTML chart.

Live progress is a rich ``Live`` panel on a terminal and one plain line every few seconds
anywhere else (CI logs stay readable). ``--staging`` runs the staging backend in a child
process (:class:`avatar_sdk.testing.StagingProcess`), so its CPU is not the fleet's.
Exit status: 0 when every session finished ok, 1 when any failed, 2 for a usage error
(a bad option, a scenario that cannot be loaded), 130 on Ctrl-C.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..config import DEFAULT_AUDIO_CODEC, AudioCodec
from ..errors import AvatarError, ErrorCode
from . import exits, interrupts
from .context import CONTEXT
from .output import Screen

if TYPE_CHECKING:
    from ..fleet.measure import FleetStats
    from ..fleet.runner import FleetReport

__all__ = ["FAILED", "FleetOptions", "command", "fleet"]

#: Exit status when at least one session failed.
FAILED = 1
#: Seconds between progress lines off a terminal (a terminal's panel refreshes 4x a second).
PLAIN_INTERVAL = 5.0


@dataclass
class FleetOptions:
    scenario: str
    sessions: int = 1
    rate: float = 10.0
    iterations: int = 1
    duration: float | None = None
    workers: int = 0
    engine: str = "local"
    ray_address: str | None = None
    staging: bool = False
    url: str | None = None
    token: str | None = field(default=None, repr=False)
    genie_url: str | None = None
    insecure: bool = False
    media: bool = False
    video: bool = False
    audio: str = "silence"
    audio_codec: AudioCodec = DEFAULT_AUDIO_CODEC
    config: dict[str, Any] = field(default_factory=dict)
    turn_timeout: float = 30.0
    jsonl: Path | None = None
    html: Path | None = None


class Progress:
    """Live figures while the run goes: a rich ``Live`` panel or periodic plain lines."""

    def __init__(self, screen: Screen, stats: FleetStats, planned: int) -> None:
        self.screen = screen
        self.stats = stats
        self.planned = planned
        self.started = time.monotonic()

    def line(self) -> str:
        from ..fleet.report import progress_line  # noqa: PLC0415

        elapsed = time.monotonic() - self.started
        return f"[{elapsed:6.1f}s] " + progress_line(self.stats.snapshot(), self.planned)

    @contextlib.asynccontextmanager
    async def shown(self) -> AsyncIterator[None]:
        if self.screen.styled:
            from rich.live import Live  # noqa: PLC0415 - only on a terminal
            from rich.text import Text  # noqa: PLC0415

            console = self.screen._console
            with Live(Text(self.line()), console=console, refresh_per_second=4) as live:
                task = asyncio.create_task(self._loop(lambda: live.update(Text(self.line())), 0.25))
                try:
                    yield
                finally:
                    task.cancel()
                    await asyncio.wait([task])
                    live.update(Text(self.line()))
            return
        task = asyncio.create_task(
            self._loop(lambda: self.screen.line(self.line()), PLAIN_INTERVAL)
        )
        try:
            yield
        finally:
            task.cancel()
            await asyncio.wait([task])
            self.screen.line(self.line())

    async def _loop(self, show: Any, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            show()


async def _run(opts: FleetOptions, screen: Screen) -> FleetReport:
    from ..fleet.engines import get_engine  # noqa: PLC0415 - the fleet loads here
    from ..fleet.measure import FleetStats  # noqa: PLC0415
    from ..fleet.plan import FleetPlan, SessionSpec  # noqa: PLC0415
    from ..fleet.runner import run_fleet  # noqa: PLC0415
    from ..fleet.worker import load_scenario  # noqa: PLC0415

    load_scenario(opts.scenario)  # a bad scenario fails before anything starts
    async with contextlib.AsyncExitStack() as stack:
        if opts.staging:
            from ..testing.process import StagingProcess  # noqa: PLC0415

            staging = await stack.enter_async_context(StagingProcess())
            screen.line(f"staging backend on {staging.url} (child process {staging.pid})")
            url, token = staging.url, staging.token
            genie_url: str | None = staging.genie_url
            control_url: str | None = staging.control_url
            insecure = True
        else:
            if not opts.url or not opts.token:
                raise AvatarError(ErrorCode.INVALID_ARGUMENT, "a URL and a token are needed")
            url, token, genie_url = opts.url, opts.token, opts.genie_url
            control_url, insecure = None, opts.insecure
        spec = SessionSpec(
            url,
            token,
            genie_url=genie_url,
            media=opts.media,
            video=opts.video,
            audio=opts.audio,
            audio_codec=opts.audio_codec,
            allow_insecure_transport=insecure,
            config=opts.config,
            control_url=control_url,
        )
        plan = FleetPlan(
            opts.scenario,
            spec,
            sessions=opts.sessions,
            rate=opts.rate,
            iterations=opts.iterations,
            duration=opts.duration,
            workers=opts.workers,
            turn_timeout=opts.turn_timeout,
        )
        options = {"address": opts.ray_address} if opts.engine == "ray" else {}
        engine = get_engine(opts.engine, **options)
        stats = FleetStats()
        progress = Progress(screen, stats, plan.sessions)
        async with progress.shown():
            report = await run_fleet(plan, engine=engine, jsonl=opts.jsonl, stats=stats)
        return dataclasses.replace(report, engine=opts.engine)


def fleet(opts: FleetOptions, screen: Screen | None = None) -> int:
    """Run the fleet to its exit status."""
    from ..fleet.report import SUMMARY_COLUMNS, summary_rows, write_html  # noqa: PLC0415

    screen = screen or Screen()
    try:
        report = interrupts.run(_run(opts, screen))
    except KeyboardInterrupt:
        print("avatar-sdk: interrupted (sessions closed, workers stopped)", file=sys.stderr)
        return exits.INTERRUPTED
    except AvatarError as error:
        from .messages import error_line  # noqa: PLC0415

        print(f"avatar-sdk: {error_line(error)}", file=sys.stderr)
        usage = error.code in (ErrorCode.INVALID_ARGUMENT, ErrorCode.INSECURE_TRANSPORT)
        return exits.USAGE if usage else exits.for_error(error)
    screen.line()
    screen.table("fleet summary", SUMMARY_COLUMNS, summary_rows(report.stats))
    if opts.jsonl is not None:
        screen.line(f"measurements: {opts.jsonl}")
    if opts.html is not None:
        screen.line(f"chart: {write_html(report, opts.html)}")
    if report.ok:
        return exits.OK
    planned = report.plan.sessions
    screen.line(f"{report.failed} of {planned} session(s) failed")
    return FAILED


# -- the command -------------------------------------------------------------------------------
_SECONDS = click.FloatRange(min=0, min_open=True)
_FILE = click.Path(dir_okay=False, writable=True, path_type=Path)


@click.command("fleet", context_settings=CONTEXT)
@click.argument("scenario")
@click.option(
    "-n",
    "--sessions",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Sessions in total.",
)
@click.option(
    "--rate",
    type=_SECONDS,
    default=10.0,
    show_default=True,
    help="Ramp: sessions started per second.",
)
@click.option(
    "--iterations",
    type=click.IntRange(min=0),
    default=1,
    show_default=True,
    help="Scenario runs per session (0: until --duration).",
)
@click.option(
    "--duration",
    type=_SECONDS,
    default=None,
    help="Seconds after which no iteration starts; sessions then close.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Worker processes or actors (0: one per CPU).",
)
@click.option(
    "--engine",
    type=click.Choice(["local", "inline", "ray"]),
    default="local",
    show_default=True,
    help="Where the workers run.",
)
@click.option(
    "--ray-address", metavar="ADDR", help="The Ray cluster to join (default: start a local one)."
)
@click.option(
    "--staging",
    is_flag=True,
    help="Run the embedded staging backend in a child process and load it.",
)
@click.option("--url", metavar="URL", help="The backend to load (token: AVATAR_TOKEN).")
@click.option(
    "--token-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Read the token from this file (default: the AVATAR_TOKEN variable).",
)
@click.option("--genie-url", metavar="URL", help="HTTP API base for tool ACKs and completion.")
@click.option("--insecure", is_flag=True, help="Allow http/ws and private hosts (--url).")
@click.option(
    "--media/--no-media",
    default=False,
    show_default=True,
    help="WebRTC audio (reply audio latency measured) or text turns only.",
)
@click.option("--video", is_flag=True, help="Subscribe to the avatar's video too (--media).")
@click.option(
    "--audio",
    default="silence",
    show_default=True,
    metavar="SOURCE",
    help="Uplink source with --media: silence, tone (PCM), opus-silence, opus-tone "
    "(pre-encoded: the cheapest), or an audio file path (Ogg/Opus sent undecoded).",
)
@click.option(
    "--audio-codec",
    type=click.Choice(["thread", "loop"]),
    default=DEFAULT_AUDIO_CODEC,
    show_default=True,
    help="Encode/decode PCM audio in aiortc's threads or on the event loop (cheaper).",
)
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="FIELD=VALUE",
    help="Set a SessionConfig field for every session (repeatable).",
)
@click.option(
    "--turn-timeout",
    type=_SECONDS,
    default=30.0,
    show_default=True,
    help="Seconds a turn may take before it counts as failed.",
)
@click.option("--jsonl", type=_FILE, help="Write every measurement here, one JSON per line.")
@click.option("--html", type=_FILE, help="Write the chart and summary here (one HTML page).")
def command(**params: Any) -> None:
    """Run SCENARIO as many concurrent sessions and measure them.

    SCENARIO: pkg.module:function, path/to/file.py[:function], or a .yaml/.json script of
    turns, pauses and staging faults (docs/fleet.md). Against --staging, or --url with the
    token in AVATAR_TOKEN or --token-file. Live progress, then a summary table. Exits 0
    when every session finished ok, 1 when any failed, 2 on a usage error, 130 on Ctrl-C.
    """  # fmt: skip
    from ..config import SessionConfig  # noqa: PLC0415
    from .options import OptionError, read_token, session_config  # noqa: PLC0415

    settings, token_file = params.pop("settings"), params.pop("token_file")
    if params["staging"] == bool(params["url"]):
        raise click.UsageError("give either --staging or --url")
    if params["video"] and not params["media"]:
        raise click.UsageError("--video needs --media")
    if params["iterations"] == 0 and params["duration"] is None:
        raise click.UsageError("--iterations 0 runs until --duration: give one")
    try:
        config = session_config(settings)
    except OptionError as exc:
        raise click.BadParameter(str(exc), param_hint="--set") from None
    defaults = SessionConfig()
    params["config"] = {
        f.name: getattr(config, f.name)
        for f in dataclasses.fields(SessionConfig)
        if getattr(config, f.name) != getattr(defaults, f.name)
    }
    params["token"] = None if params["staging"] else read_token(token_file)
    sys.exit(fleet(FleetOptions(**params)))
