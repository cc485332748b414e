"""``avatar-sdk``: talk to an avatar headless, the fault-tour demo, fleets of sessions
(:mod:`avatar_sdk._cli.fleet`), the state diagram, and a standalone staging backend.

Usage errors exit 2 (click's convention); ``talk`` has its own exit-code contract
(:mod:`avatar_sdk._cli.exits`, printed by ``avatar-sdk talk --help``).
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import sys
from pathlib import Path
from typing import Any

import click

from .._version import __version__
from ..errors import AvatarError
from ..logs import ENGINEIO_LOGGER, SOCKETIO_LOGGER
from . import exits, interrupts
from .context import CONTEXT
from .fleet import command as fleet_command
from .inspect import command as inspect_command
from .netlab import command as netlab_command
from .options import TOKEN_ENV, read_token
from .replay import command as replay_command

#: The Socket.IO/WebRTC stack's loggers, quiet (ERROR) unless --verbose.
_STACK = ("engineio", "socketio", "aioice", "aiortc", SOCKETIO_LOGGER, ENGINEIO_LOGGER)
_VERBOSE_HELP = "Log what the SDK does (INFO) on stderr."


class _Configured:
    """Whether this command configured logging (not an embedding that had its own)."""

    ours = False


def _configure_logging(verbose: bool) -> None:
    """The console script is an application, so it (not the library) decides where log
    records go: the SDK's warnings on stderr, and the Socket.IO/WebRTC stack's transport
    chatter ("Server sent close packet ...") only with ``--verbose`` (the output already
    tells each drop and recovery). An embedding that configured logging keeps its own.
    Called by the group (``avatar-sdk -v talk``), then again by a subcommand's own
    ``-v`` (``avatar-sdk talk -v``), which raises what the group set to INFO."""
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.WARNING, format="avatar-sdk: %(levelname)s %(name)s: %(message)s"
        )
        _Configured.ours = True
        for name in _STACK:
            logging.getLogger(name).setLevel(logging.ERROR)
    if verbose and _Configured.ours:
        logging.getLogger().setLevel(logging.INFO)
        for name in _STACK:
            logging.getLogger(name).setLevel(logging.NOTSET)


def _subcommand_verbose(_ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        _configure_logging(True)


def _add_verbose(group: click.Group) -> None:
    """``-v/--verbose`` on every subcommand too (``avatar-sdk talk -v``), the same as
    ``avatar-sdk -v talk``."""
    for command in group.commands.values():
        if isinstance(command, click.Group):
            _add_verbose(command)
        elif not any("--verbose" in param.opts for param in command.params):
            command.params.append(
                click.Option(
                    ["-v", "--verbose"],
                    is_flag=True,
                    expose_value=False,
                    callback=_subcommand_verbose,
                    help=_VERBOSE_HELP,
                )
            )


class _Interruptible(click.Group):
    """Ctrl-C before a command handles it itself (its imports, its start-up) exits 130,
    quietly, as documented, instead of click's ``Aborted!`` and 1."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        interrupts.install()  # a Ctrl-C inside a command's imports: 130, no traceback
        try:
            return super().main(*args, **kwargs)
        finally:
            interrupts.uninstall()

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            sys.exit(exits.INTERRUPTED)


@click.group(cls=_Interruptible, context_settings=CONTEXT, epilog=exits.epilog())
@click.version_option(__version__, "--version", "-V", prog_name="avatar-sdk")
@click.option("-v", "--verbose", is_flag=True, help=_VERBOSE_HELP)
def main(*, verbose: bool) -> None:
    """Live AI-avatar conversations from the command line.

    \b
    avatar-sdk talk URL --say "Hello"     a headless conversation (token: AVATAR_TOKEN)
    avatar-sdk demo                       the fault tour against the embedded staging backend
    avatar-sdk fleet SCENARIO -n 50       many sessions at once: load tests and bot fleets
    avatar-sdk staging serve --port 8765  a standalone staging backend with a fault API
    avatar-sdk replay CASSETTE            replay a recorded session against staging
    avatar-sdk netlab --loss 5 -- CMD     CMD against staging across a faulty network (root)
    avatar-sdk diagram                    the session state machine as Mermaid
    """
    _configure_logging(verbose)


# -- talk ------------------------------------------------------------------------------------
@main.command(context_settings=CONTEXT, epilog=exits.epilog())
@click.argument("url")
@click.option(
    "--say",
    "turns",
    multiple=True,
    metavar="TEXT",
    help="A user turn (repeatable, in order). Without --say (and --audio), turns are read "
    "from stdin, one per line.",
)
@click.option(
    "--token-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help=f"Read the token from this file (default: the {TOKEN_ENV} environment variable).",
)
@click.option(
    "--genie-url",
    metavar="URL",
    help="HTTP API base for tool ACKs and completion (default: the one the backend names).",
)
@click.option("--thread", "thread_id", metavar="ID", help="Resume this conversation thread.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per event.")
@click.option(
    "--audio",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Speak this WAV/OGG (any FFmpeg-readable) file into the uplink.",
)
@click.option(
    "--record",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Save the avatar's audio and video to this file (.mp4, .webm, .wav...).",
)
@click.option(
    "--cassette",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Write a cassette of the session's wire here (no token; replay it with "
    "`avatar-sdk replay`).",
)
@click.option("--no-media", is_flag=True, help="Text only: no WebRTC audio or video.")
@click.option("--no-video", is_flag=True, help="Audio only: no avatar video.")
@click.option(
    "--insecure",
    is_flag=True,
    help="Allow http/ws and private hosts (a local backend such as `staging serve`).",
)
@click.option(
    "--ca-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="PEM file of a private CA to trust besides the system's.",
)
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="FIELD=VALUE",
    help="Set a SessionConfig field, e.g. --set close_timeout=1 "
    "--set cold_reconnect.max_attempts=3 (repeatable).",
)
@click.option(
    "--reply-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=30.0,
    show_default=True,
    help="Seconds to wait for each answer (and the greeting) before going on.",
)
@click.option(
    "--connect-attempts",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Connect attempts for errors a retry can fix (backoff between them).",
)
@click.option(
    "--renew",
    is_flag=True,
    help="Renew the server session before the server's time cap ends it, on the same "
    "thread (RenewalPolicy defaults; docs/lifecycle.md).",
)
@click.option(
    "--voice",
    is_flag=True,
    help="Talk by voice: the microphone in (its echo cancelled), the avatar on the speaker, "
    "captions printed, until Ctrl-C (the voice extra: pip install 'avatar-sdk[voice]').",
)
@click.option(
    "--input",
    "input_device",
    metavar="DEVICE",
    help="With --voice: the microphone, by index or name (default: the system's input).",
)
@click.option(
    "--output",
    "output_device",
    metavar="DEVICE",
    help="With --voice: the speaker, by index or name (default: the system's output).",
)
@click.option(
    "--no-echo-cancellation",
    is_flag=True,
    help="With --voice: send the microphone as it is (headphones).",
)
@click.option(
    "--list-devices",
    is_flag=True,
    is_eager=True,
    expose_value=False,
    callback=lambda ctx, _param, value: _list_devices(ctx) if value else None,
    help="List the audio devices (index, name, channels) for --input/--output, and exit.",
)
def talk(
    *,
    url: str,
    turns: tuple[str, ...],
    token_file: Path | None,
    genie_url: str | None,
    thread_id: str | None,
    as_json: bool,
    audio: Path | None,
    record: Path | None,
    cassette: Path | None,
    no_media: bool,
    no_video: bool,
    insecure: bool,
    ca_file: Path | None,
    settings: tuple[str, ...],
    reply_timeout: float,
    connect_attempts: int,
    renew: bool,
    voice: bool,
    input_device: str | None,
    output_device: str | None,
    no_echo_cancellation: bool,
) -> None:
    """Hold a headless conversation with the avatar at URL (by voice with --voice).

    Prints the avatar's replies as they stream, its tool calls and every recovery; Ctrl-C
    completes the thread and closes within close_timeout. The token comes from the
    AVATAR_TOKEN environment variable or --token-file, never from a flag.
    """
    from .options import OptionError, session_config  # noqa: PLC0415 - fast --help

    if no_media and (audio is not None or record is not None):
        raise click.UsageError("--audio and --record need media: drop --no-media")
    voice_options = bool(input_device or output_device or no_echo_cancellation)
    _check_voice_usage(
        voice, voice_options, turns=bool(turns), audio=audio, record=record, no_media=no_media
    )
    try:
        config = session_config(settings)
    except OptionError as exc:
        raise click.BadParameter(str(exc), param_hint="--set") from None
    if renew and config.renewal is None:
        from ..config import RenewalPolicy  # noqa: PLC0415

        config = config.with_(renewal=RenewalPolicy())
    token = read_token(token_file)
    from .talk import TalkOptions  # noqa: PLC0415 - loads the session stack
    from .talk import talk as run_talk  # noqa: PLC0415

    opts = TalkOptions(
        url=url,
        token=token,
        turns=list(turns) if turns else None,
        genie_url=genie_url,
        thread_id=thread_id,
        json=as_json,
        audio=audio,
        record=record,
        cassette=cassette,
        media=not no_media,
        video=not no_video,
        insecure=insecure,
        ca_file=ca_file,
        config=config,
        reply_timeout=reply_timeout,
        connect_attempts=connect_attempts,
    )
    try:
        if voice:
            from .voice import VoiceOptions, device_choice, talk_by_voice  # noqa: PLC0415

            choice = VoiceOptions(
                input=device_choice(input_device),
                output=device_choice(output_device),
                echo_cancellation=not no_echo_cancellation,
            )
            code = talk_by_voice(opts, choice)
        else:
            code = run_talk(opts)
    except AvatarError as error:  # raised outside the session (building it is usage: 2)
        from .messages import error_line  # noqa: PLC0415

        click.echo(f"avatar-sdk: {error_line(error)}", err=True)
        code = exits.for_error(error)
    if voice:
        # Native threads (livekit's FFI, PortAudio) must not meet the finalizing interpreter.
        from .process_exit import leave_process  # noqa: PLC0415

        leave_process(code)
    sys.exit(code)


def _check_voice_usage(
    voice: bool,
    voice_options: bool,
    *,
    turns: bool,
    audio: Path | None,
    record: Path | None,
    no_media: bool,
) -> None:
    """--voice takes its turns from the microphone and plays the avatar: the options that
    do either otherwise conflict with it (usage errors, exit 2)."""
    if not voice:
        if voice_options:
            raise click.UsageError("--input, --output and --no-echo-cancellation need --voice")
        return
    clashing = [
        flag
        for flag, given in (("--say", turns), ("--audio", audio is not None),
                            ("--record", record is not None), ("--no-media", no_media))
        if given
    ]  # fmt: skip
    if clashing:
        raise click.UsageError(f"--voice talks through the devices: drop {', '.join(clashing)}")


def _list_devices(ctx: click.Context) -> None:
    from .voice import list_devices  # noqa: PLC0415 - loads sounddevice

    ctx.exit(list_devices())


# -- demo --------------------------------------------------------------------------------------
@main.command(context_settings=CONTEXT)
@click.option("--no-media", is_flag=True, help="Control plane only (text): no WebRTC.")
@click.option(
    "--faults",
    metavar="LIST",
    help="Comma-separated faults to inject, in tour order: socket, cold, stv, asr "
    "(default: all; stv and asr need media; 'none' for a fault-free run).",
)
def demo(*, no_media: bool, faults: str | None) -> None:
    """The fault tour: the embedded staging backend and a live session through faults.

    A live timeline (state, each recovery with its tier and measured duration, the
    avatar's words), then a summary table. Exits 0 when every recovery happened.
    """
    from .demo import demo as run_demo  # noqa: PLC0415 - loads the session stack
    from .demo import select  # noqa: PLC0415

    try:
        chosen = select(faults, media=not no_media)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--faults") from None
    sys.exit(run_demo(chosen, media=not no_media))


# -- fleet (its options live with it) ---------------------------------------------------------
main.add_command(fleet_command)

# -- replay (its options live with it) --------------------------------------------------------
main.add_command(replay_command)

# -- inspect (its options live with it) -------------------------------------------------------
main.add_command(inspect_command)

# -- netlab (its options live with it) --------------------------------------------------------
main.add_command(netlab_command)


# -- diagram -----------------------------------------------------------------------------------
DIAGRAM_VIEWS = ("all", "overview", "connect", "socket", "media", "cold", "renewal", "pause")


@main.command(context_settings=CONTEXT)
@click.option(
    "--view",
    type=click.Choice(DIAGRAM_VIEWS),
    default="all",
    show_default=True,
    help="The whole machine, the overview of the top states, or one part of the story.",
)
def diagram(view: str) -> None:
    """Print the session state machine as Mermaid."""
    from ..session.core import diagram as drawn  # noqa: PLC0415

    text = {"all": drawn.mermaid, "overview": drawn.overview}.get(view)
    click.echo(text() if text else drawn.view(view), nl=False)


# -- staging serve -----------------------------------------------------------------------------
async def serve(
    host: str,
    port: int,
    token: str | None,
    advertise_host: str | None = None,
    *,
    media_host: str | None = None,
    max_conversation_length: float | None = None,
    time_warning_before: float | None = None,
    one_session_per_thread: bool = False,
) -> int:
    """Run the staging backend until interrupted, with its HTTP control API
    (:mod:`avatar_sdk.testing.staging.control`, documented in ``docs/testing.md``)."""
    # Here, not at the top: the staging server pulls in aiortc, PyAV, Socket.IO and aiohttp
    # (most of a second), which `avatar-sdk --help` and the other commands never need.
    from ..testing import StagingServer  # noqa: PLC0415
    from ..testing.staging.control import CONTROL_PREFIX  # noqa: PLC0415
    from ..testing.staging.scripted import AGENTIC_PREFIX  # noqa: PLC0415

    staging = StagingServer(
        host=host,
        port=port,
        token=token,
        advertise_host=advertise_host,
        media_host=media_host,
        control_api=True,
        max_conversation_length=max_conversation_length,
        time_warning_before=time_warning_before,
        concurrent_thread_sessions=not one_session_per_thread,
    )
    await staging.start()
    url = staging.public_url
    print(
        json.dumps(
            {
                "url": url,
                "genie_url": f"{url}/genie",
                "token": staging.token,
                "agentic_url": f"{url}{AGENTIC_PREFIX}",
                "admin_token": staging.admin_token,
                "visual_id": staging.visual_id,
            }
        )
    )
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


@main.group(context_settings=CONTEXT)
def staging() -> None:
    """The staging backend (the one the test suite uses)."""


@staging.command("serve", context_settings=CONTEXT)
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind.")
@click.option(
    "--port", type=int, default=0, show_default=True, help="Port to bind (0: a free one)."
)
@click.option(
    "--token", default=None, help="The token clients must present (default: a random one)."
)
@click.option(
    "--advertise-host",
    default=None,
    metavar="NAME",
    help="Host name in the URLs handed to clients (the WHEP URL), instead of --host.",
)
@click.option(
    "--media-host",
    default=None,
    metavar="NAME",
    help="Host name of the WHEP URL only (a public name for clients refusing private hosts).",
)
@click.option(
    "--max-conversation-length",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="SECONDS",
    help="Cap every server session like the service: warning, then expired + ended.",
)
@click.option(
    "--time-warning-before",
    type=click.FloatRange(min=0),
    default=None,
    metavar="SECONDS",
    help="How long before the cap the warning comes (default: 60, or a quarter of the cap).",
)
@click.option(
    "--one-session-per-thread",
    is_flag=True,
    help="Refuse a second live server session on a thread (throwToNoAgent).",
)
def staging_serve(
    *,
    host: str,
    port: int,
    token: str | None,
    advertise_host: str | None,
    media_host: str | None,
    max_conversation_length: float | None,
    time_warning_before: float | None,
    one_session_per_thread: bool,
) -> None:
    """Run it standalone until Ctrl-C; prints its URL and token as JSON on the first line.

    Faults and brain scripts over HTTP: POST URL/_control/faults/NAME or
    URL/_control/brain/NAME with JSON keyword arguments (docs/testing.md). Exits 130 on
    Ctrl-C, 3 when it cannot listen (the port is taken).
    """
    try:
        code = interrupts.run(
            serve(
                host,
                port,
                token,
                advertise_host,
                media_host=media_host,
                max_conversation_length=max_conversation_length,
                time_warning_before=time_warning_before,
                one_session_per_thread=one_session_per_thread,
            )
        )
    except KeyboardInterrupt:
        click.echo("avatar-sdk: interrupted", err=True)
        code = exits.INTERRUPTED
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            reason = "the port is already in use"
        else:
            reason = exc.strerror or type(exc).__name__
        click.echo(f"avatar-sdk: cannot serve on {host}:{port}: {reason}", err=True)
        code = exits.REFUSED
    sys.exit(code)


_add_verbose(main)

if __name__ == "__main__":
    main(prog_name="avatar-sdk")
