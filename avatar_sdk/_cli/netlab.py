"""``avatar-sdk netlab [FAULTS] -- COMMAND``: the network lab for people.

It opens a :class:`~avatar_sdk.testing.NetworkLab` (root: two namespaces and a veth pair),
starts the staging backend in the server namespace, turns on the faults asked for, and runs
COMMAND in the client namespace with the backend's address in its environment
(``AVATAR_URL``, ``AVATAR_TOKEN``, ``AVATAR_GENIE_URL``, ``AVATAR_CONTROL_URL``). Without
COMMAND it prints how to enter the client namespace and waits for Ctrl-C. The lab is removed
when COMMAND ends, on Ctrl-C and on an error.

Exit codes: COMMAND's own; 130 on Ctrl-C; 3 when the lab cannot run here (what is missing
and the command that fixes it are printed); 2 usage errors.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import click

from . import exits, interrupts
from .context import CONTEXT

if TYPE_CHECKING:
    from ..testing.netlab import NetworkLab

_DIRECTIONS = click.Choice(["up", "down", "both"])


@dataclass
class LabFaults:
    """The faults the command line asked for (turned on before COMMAND starts)."""

    loss: float | None = None
    loss_direction: str = "both"
    blackhole: str | None = None
    reject: str | None = None
    rate: float | None = None
    rate_direction: str = "down"
    command: list[str] = field(default_factory=list)


async def _apply(lab: NetworkLab, faults: LabFaults) -> list[str]:
    on: list[str] = []
    if faults.loss:
        fault = await lab.loss(faults.loss, direction=faults.loss_direction)  # type: ignore[arg-type]
        on.append(fault.description)
    if faults.blackhole:
        on.append((await lab.blackhole(protocol=faults.blackhole)).description)  # type: ignore[arg-type]
    if faults.reject:
        on.append((await lab.reject(faults.reject)).description)  # type: ignore[arg-type]
    if faults.rate:
        fault = await lab.rate_limit(faults.rate, direction=faults.rate_direction)  # type: ignore[arg-type]
        on.append(fault.description)
    return on


async def run_lab(faults: LabFaults, token: str | None) -> int:
    from ..testing.netlab import NetworkLab  # noqa: PLC0415 - loads the staging stack

    async with NetworkLab() as lab, lab.staging(token=token) as staging:
        on = await _apply(lab, faults)
        env = {
            **os.environ,
            "AVATAR_URL": staging.url,
            "AVATAR_TOKEN": staging.token,
            "AVATAR_GENIE_URL": staging.genie_url,
            "AVATAR_CONTROL_URL": staging.control_url,
        }
        info = {
            "client_netns": lab.client_netns,
            "server_netns": lab.server_netns,
            "client_address": lab.client_address,
            "url": staging.url,
            "faults": on,
        }
        click.echo(f"avatar-sdk netlab: {json.dumps(info)}", err=True)
        if not faults.command:
            click.echo(
                "avatar-sdk netlab: run a command on the client side with\n"
                f"  sudo ip netns exec {lab.client_netns} COMMAND\n"
                "(the token is printed by `staging serve`; here, pass a COMMAND to get it "
                "as AVATAR_TOKEN); Ctrl-C removes the lab",
                err=True,
            )
            await asyncio.Event().wait()
            return 0
        child = await asyncio.create_subprocess_exec(*lab.client_command(faults.command), env=env)
        try:
            return await child.wait()
        finally:
            if child.returncode is None:  # cancelled (Ctrl-C): the child got SIGINT too
                try:
                    await asyncio.wait_for(asyncio.shield(child.wait()), 5.0)
                except TimeoutError:
                    child.kill()
                    await child.wait()


@click.command("netlab", context_settings=CONTEXT)
@click.option(
    "--loss",
    type=click.FloatRange(0, 100),
    metavar="PERCENT",
    help="Random UDP loss (each datagram, independently).",
)
@click.option("--loss-direction", type=_DIRECTIONS, default="both", show_default=True)
@click.option(
    "--blackhole",
    type=click.Choice(["all", "tcp", "udp"]),
    help="Drop every packet of that kind, both ways.",
)
@click.option(
    "--reject",
    type=click.Choice(["tcp", "udp"]),
    help="The server side refuses the client: TCP reset, or ICMP port unreachable for UDP.",
)
@click.option(
    "--rate", type=click.FloatRange(min=0, min_open=True), metavar="KBIT", help="Rate limit."
)
@click.option(
    "--rate-direction", type=click.Choice(["up", "down"]), default="down", show_default=True
)
@click.option("--token", default=None, help="The staging token (default: a random one).")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def command(
    *,
    loss: float | None,
    loss_direction: str,
    blackhole: str | None,
    reject: str | None,
    rate: float | None,
    rate_direction: str,
    token: str | None,
    command: tuple[str, ...],
) -> None:
    """Run COMMAND against the staging backend across a real, faulty network (root).

    \b
    sudo avatar-sdk netlab --loss 5 -- sh -c 'avatar-sdk talk "$AVATAR_URL" --insecure --say hi'
    sudo avatar-sdk netlab --rate 300 -- python my_bot.py

    COMMAND runs in the lab's client namespace with AVATAR_URL, AVATAR_TOKEN,
    AVATAR_GENIE_URL and AVATAR_CONTROL_URL set; the staging backend serves in the server
    namespace. Exits with COMMAND's code; 130 on Ctrl-C; 3 when the lab cannot run here.
    """
    from ..testing.netlab import requirements  # noqa: PLC0415

    problem = requirements()
    if problem is not None:
        click.echo(f"avatar-sdk: {problem}", err=True)
        sys.exit(exits.REFUSED)
    faults = LabFaults(
        loss=loss,
        loss_direction=loss_direction,
        blackhole=blackhole,
        reject=reject,
        rate=rate,
        rate_direction=rate_direction,
        command=list(command),
    )
    try:
        code = interrupts.run(run_lab(faults, token))
    except KeyboardInterrupt:
        click.echo("avatar-sdk: interrupted; the lab is removed", err=True)
        code = exits.INTERRUPTED
    sys.exit(code)
