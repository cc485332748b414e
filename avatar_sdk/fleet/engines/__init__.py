"""Engines: where a fleet's workers run. Every engine runs the same
:func:`avatar_sdk.fleet.worker.run_worker` once per :class:`WorkerAssignment` and hands
each measurement to ``emit`` on the driver's loop.

* ``inline``: one worker on the driver's own event loop (no processes; a scenario callable
  is used as is).
* ``local`` (the default): one ``spawn`` process per assignment, so every core is used.
* ``ray``: one Ray actor per assignment, on a laptop or an existing cluster (the ``ray``
  extra; loaded only when asked for).

Engines are looked up by name here, lazily, so ``import avatar_sdk.fleet`` never imports
``multiprocessing`` machinery or Ray.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from ...errors import AvatarError, ErrorCode
from ..plan import WorkerAssignment
from ..worker import Emit

__all__ = ["ENGINES", "Engine", "get_engine"]


@runtime_checkable
class Engine(Protocol):
    """Runs assignments and streams their measurements back.

    ``run`` is called on the driver's loop and returns when every assignment's worker has
    finished; ``emit`` must be called on that loop (measurements may arrive in batches).
    Every session of an assignment ends with a ``session_finished`` measurement: a worker
    lost before reporting its sessions has them reported ``failed`` with code
    ``internal`` by the engine. Cancelling ``run`` stops the workers (their sessions close)
    and returns only when they are gone. An engine may re-base the assignments' ``t0`` when
    its workers took time to start (``WorkerAssignment.with_t0``).
    """

    async def run(self, assignments: Sequence[WorkerAssignment], emit: Emit) -> None: ...


#: Engine name -> (module, class). The class is built with the keyword options given to
#: :func:`get_engine` (``ray``: ``address=``).
ENGINES: dict[str, tuple[str, str]] = {
    "inline": ("avatar_sdk.fleet.engines.inline", "InlineEngine"),
    "local": ("avatar_sdk.fleet.engines.local", "LocalEngine"),
    "ray": ("avatar_sdk.fleet.engines.ray", "RayEngine"),
}


def get_engine(name: str, **options: Any) -> Engine:
    """The engine called ``name``, built with ``options``. ``AvatarError(INVALID_ARGUMENT)``
    for an unknown name, or an engine whose dependency is missing (``pip install
    avatar-sdk[ray]``)."""
    entry = ENGINES.get(name)
    if entry is None:
        raise AvatarError(
            ErrorCode.INVALID_ARGUMENT,
            f"unknown fleet engine {name!r} (known: {', '.join(sorted(ENGINES))})",
        )
    module_name, class_name = entry
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = " (pip install 'avatar-sdk[ray]')" if name == "ray" else ""
        raise AvatarError(
            ErrorCode.INVALID_ARGUMENT, f"the {name} engine cannot load: {exc}{hint}"
        ) from None
    engine: Engine = getattr(module, class_name)(**options)
    return engine
