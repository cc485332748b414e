"""``avatar-sdk inspect FILE``: a cassette or a journal drawn as one self-contained HTML
page (a time axis: states, turns and their latency figures, recoveries by tier, media gaps,
errors, renewals; hover for details). Opens offline: nothing in it is fetched.

Exit codes: 0 the page was written, 2 usage errors (a missing, unreadable or malformed
file, an output that cannot be written).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .context import CONTEXT
from .exits import OK, USAGE


@click.command("inspect", context_settings=CONTEXT)
@click.argument("record", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The HTML file to write [default: RECORD with the suffix .html].",
)
def command(*, record: Path, output: Path | None) -> None:
    """Draw RECORD, a cassette (AvatarSession(record=...), `talk --cassette`) or a journal
    (AvatarSession(journal=...)), as one HTML page that works offline: the session on a
    time axis, its states as bands, each turn with its latency figures, recoveries by
    tier (socket, media, cold) with their durations, media gaps and stalls, errors and
    renewals. Hover an element for its details. A journal with several sessions draws
    each.

    \b
    Exit codes:
      0  the page was written (its path is printed)
      2  usage error (missing, unreadable or malformed file; output not writable)
    """
    from ..errors import AvatarError  # noqa: PLC0415 - fast --help
    from ..inspect.files import inspect_file  # noqa: PLC0415

    target = output if output is not None else record.with_suffix(".html")
    if target.resolve() == record.resolve():
        click.echo(f"avatar-sdk: the output would overwrite {record}", err=True)
        sys.exit(USAGE)
    try:
        timelines = inspect_file(record, target)
    except AvatarError as error:
        click.echo(f"avatar-sdk: {error.message}", err=True)
        sys.exit(USAGE)
    except OSError as exc:
        click.echo(f"avatar-sdk: cannot write {target} ({type(exc).__name__})", err=True)
        sys.exit(USAGE)
    sessions = len(timelines)
    click.echo(f"{target} ({sessions} session{'s' if sessions != 1 else ''})")
    sys.exit(OK)


__all__ = ["OK", "USAGE", "command"]
