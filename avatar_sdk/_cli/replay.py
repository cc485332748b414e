"""``avatar-sdk replay CASSETTE``: replay a recorded session against the staging backend.

Exit codes: 0 the replay matched the recording, 1 it diverged (the first divergence is
printed), 2 usage errors (a missing, unreadable or malformed cassette).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from . import interrupts
from .context import CONTEXT
from .exits import USAGE

SAME = 0
DIVERGED = 1


@click.command("replay", context_settings=CONTEXT)
@click.argument("cassette", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--answer-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=10.0,
    show_default=True,
    help="Seconds to wait for each recorded client step before reporting a divergence.",
)
@click.option(
    "--max-gap",
    type=click.FloatRange(min=0),
    default=0.25,
    show_default=True,
    help="Longest pause kept between two recorded server events (seconds).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as one JSON object.")
def command(*, cassette: Path, answer_timeout: float, max_gap: float, as_json: bool) -> None:
    """Replay CASSETTE (written by AvatarSession(record=...) or `talk --cassette`) against
    the staging backend scripted by it, with the session configuration it recorded.

    \b
    Exit codes:
      0  same: the SDK did what the recording shows
      1  diverged: the first divergence is printed (expected, got, offset)
      2  usage error (missing, unreadable or malformed cassette)
    """
    from ..cassette.format import load  # noqa: PLC0415 - fast --help
    from ..errors import AvatarError  # noqa: PLC0415

    try:
        tape = load(cassette)
    except AvatarError as error:
        click.echo(f"avatar-sdk: {error.message}", err=True)
        sys.exit(USAGE)
    if tape.truncated_line is not None or not tape.complete:
        where = f" at line {tape.truncated_line}" if tape.truncated_line else ""
        click.echo(
            f"avatar-sdk: {cassette} is truncated{where} (the recording did not close it);"
            f" replaying its {len(tape.records)} readable records",
            err=True,
        )
    from ..testing.replay import dumps_result, replay_cassette  # noqa: PLC0415

    result = interrupts.run(replay_cassette(tape, answer_timeout=answer_timeout, max_gap=max_gap))
    click.echo(dumps_result(result) if as_json else str(result))
    for line in result.call_errors:
        click.echo(f"avatar-sdk: a replayed call failed: {line}", err=True)
    sys.exit(SAME if result.same else DIVERGED)


__all__ = ["DIVERGED", "SAME", "USAGE", "command"]
