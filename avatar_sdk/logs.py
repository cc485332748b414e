"""The SDK's logging policy: it logs, it never configures.

* Every module logs to a logger under ``avatar_sdk`` (:func:`sdk_logger`, which gives
  each one the secret-redacting filter: a filter on a parent does not see its children's
  records); the SDK adds no handler (not even a ``NullHandler``: with no configuration at all,
  Python's last-resort handler still shows its warnings and errors on stderr), sets no
  level and never calls ``basicConfig``. Where the records go is the application's choice.
* The ``transitions`` library logs two or three INFO lines for every state change of every
  machine ("Finished processing state idle exit callbacks.", "Executed callback ...").
  For the SDK's own session machines that is pure noise in an application's INFO logs
  (``avatar_sdk.session.core.machine`` already logs each transition once, as ``state a -> b
  (trigger)``). So one filter, :data:`MACHINE_NOISE`, is attached to the two
  ``transitions`` loggers that emit them: it drops records below WARNING that belong to a
  machine named :data:`MACHINE_NAME`, and nothing else. Levels are untouched, other
  applications' machines keep their INFO lines, and warnings and errors always pass.
  To see the SDK machine's own lines too (debugging the SDK), remove the filter:
  ``logging.getLogger(name).removeFilter(MACHINE_NOISE)`` for each name in
  :data:`NOISY_LOGGERS`.

* python-socketio and python-engineio, given ``logger=False``, *configure* their
  ``socketio.client`` / ``engineio.client`` loggers the first time a client is built (level
  ERROR and a ``StreamHandler`` of their own, so an application's handlers print their
  errors twice and its levels are overridden). The SDK therefore hands them a logger
  object instead. The staging server's get :func:`warnings_only`: their per-packet INFO
  lines are dropped, their warnings and errors reach the application's configuration like
  any other record. The SDK's own clients get :func:`library_log`: records under the
  SDK's names :data:`SOCKETIO_LOGGER` / :data:`ENGINEIO_LOGGER`, INFO chatter dropped, and
  what they warn about or report as an error re-emitted at INFO (at DEBUG when the SDK
  expected it). Every normal close used to print ``WARNING engineio.client: Server sent
  close packet data None, aborting`` (the server answering the client's own disconnect), and
  a server closing a live socket printed ``Server sent close packet data 1000, aborting``
  bare on a user's stderr (Python's last-resort handler shows WARNING and above when nothing
  is configured): the SDK notices every such end itself and reports it in its own terms
  (``reconnecting``, ``ended``, its own log lines), so the library's line is detail for whoever
  asks for INFO (``avatar-sdk -v``), never a line of its own by default (issue 33).
* A child process the SDK starts (a fleet worker, a Ray actor, the staging process) copies
  the parent's levels of :data:`MIRRORED_LOGGERS` (:func:`logger_levels`, then
  :func:`set_logger_levels` in the child), so a CLI that quiets the stack's chatter quiets
  it in every process. Levels only: handlers stay the child's own.
* Other third-party loggers are left alone: ``aioice`` logs every ICE candidate-pair
  check at INFO, for any peer in the process (the SDK's or yours alike, so the SDK cannot
  tell them apart); silence it in your own configuration with
  ``logging.getLogger("aioice").setLevel(logging.WARNING)``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Final

from .redact import REDACTING_FILTER

__all__ = [
    "ENGINEIO_LOGGER",
    "MACHINE_NAME",
    "MACHINE_NOISE",
    "MIRRORED_LOGGERS",
    "NOISY_LOGGERS",
    "SOCKETIO_LOGGER",
    "LibraryLog",
    "MachineNoiseFilter",
    "WarningsOnly",
    "install",
    "library_log",
    "logger_levels",
    "sdk_logger",
    "set_logger_levels",
    "warnings_only",
]

#: The ``name`` the session's ``transitions`` machine is built with; transitions prefixes
#: every record of that machine with ``"<name>: "`` as the first argument.
MACHINE_NAME: Final = "avatar_sdk"
_PREFIX: Final = MACHINE_NAME + ": "

#: The ``transitions`` loggers that log per-callback records.
NOISY_LOGGERS: Final = ("transitions.core", "transitions.extensions.nesting")


def sdk_logger(name: str) -> logging.Logger:
    """The logger of an SDK module, scrubbing registered secrets from every record.

    A logger's filters see only the records logged on that very logger, not its
    children's, so a filter on ``avatar_sdk`` alone would let ``avatar_sdk.fleet.worker``
    print a token: each module's logger carries :data:`~avatar_sdk.redact.REDACTING_FILTER`
    itself. A filter is not configuration: levels, handlers and propagation stay the
    application's, and with no secret registered it costs one check per record.
    """
    logger = logging.getLogger(name)
    if REDACTING_FILTER not in logger.filters:
        logger.addFilter(REDACTING_FILTER)
    return logger


class MachineNoiseFilter(logging.Filter):
    """Drops ``transitions`` records below WARNING that belong to an SDK machine."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            return True
        args = record.args
        return not (isinstance(args, tuple) and args and args[0] == _PREFIX)


MACHINE_NOISE: Final = MachineNoiseFilter()


def install() -> None:
    """Attach :data:`MACHINE_NOISE` to :data:`NOISY_LOGGERS` (idempotent: a logger holds
    a filter once)."""
    for name in NOISY_LOGGERS:
        logger = logging.getLogger(name)
        if MACHINE_NOISE not in logger.filters:
            logger.addFilter(MACHINE_NOISE)


class WarningsOnly(logging.LoggerAdapter[logging.Logger]):
    """A logger object for libraries that take one (``logger=``): records at WARNING and
    above go to the wrapped logger, under its name and through its filters; the rest are
    dropped before they are formatted. Nothing global is changed."""

    def isEnabledFor(self, level: int) -> bool:
        return level >= logging.WARNING and self.logger.isEnabledFor(level)


def warnings_only(name: str) -> WarningsOnly:
    """:class:`WarningsOnly` around ``logging.getLogger(name)``; e.g. for the staging
    backend's python-socketio server: ``AsyncServer(logger=warnings_only("socketio.server"),
    engineio_logger=warnings_only("engineio.server"))``."""
    return WarningsOnly(logging.getLogger(name), {})


#: Where the records of the SDK's own Socket.IO / Engine.IO clients go (:func:`library_log`).
SOCKETIO_LOGGER: Final = "avatar_sdk.transport.socketio"
ENGINEIO_LOGGER: Final = "avatar_sdk.transport.engineio"


class LibraryLog(logging.LoggerAdapter[logging.Logger]):
    """The logger object (``logger=``) of one library client the SDK owns.

    Below WARNING: dropped before formatting (per-packet chatter). WARNING and above:
    re-emitted at INFO, or at DEBUG when ``expected()`` holds at that moment (the SDK is
    closing the connection, or already knows why it ended). The SDK tells every end of a
    connection itself, so a library's line is detail, never news on stderr by default.
    Nothing global is changed: the wrapped logger keeps the application's level, handlers
    and propagation."""

    def __init__(self, logger: logging.Logger, expected: Callable[[], bool]) -> None:
        super().__init__(logger, {})
        self._expected = expected

    def isEnabledFor(self, level: int) -> bool:
        return level >= logging.WARNING and self.logger.isEnabledFor(logging.DEBUG)

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        if level < logging.WARNING:
            return
        level = logging.DEBUG if self._expected() else logging.INFO
        if self.logger.isEnabledFor(level):
            msg, options = self.process(msg, kwargs)
            self.logger.log(level, msg, *args, **options)


def library_log(name: str, expected: Callable[[], bool]) -> LibraryLog:
    """:class:`LibraryLog` on the SDK logger ``name`` (with the redacting filter)."""
    return LibraryLog(sdk_logger(name), expected)


#: Loggers whose level a child process copies from its parent (the SDK's own and the
#: stack under it: Socket.IO, WebRTC, HTTP).
MIRRORED_LOGGERS: Final = (
    "avatar_sdk",
    SOCKETIO_LOGGER,
    ENGINEIO_LOGGER,
    "engineio",
    "socketio",
    "aioice",
    "aiortc",
    "aiohttp",
)


def logger_levels() -> dict[str, int]:
    """This process's levels of :data:`MIRRORED_LOGGERS`, to hand to a child (picklable)."""
    return {name: logging.getLogger(name).level for name in MIRRORED_LOGGERS}


def set_logger_levels(levels: Mapping[str, int]) -> None:
    """In the child: the levels :func:`logger_levels` read in the parent."""
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)
