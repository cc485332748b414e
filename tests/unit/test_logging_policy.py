"""The SDK logs but never configures logging (``avatar_sdk.logs``): no handler, no level,
and the state-machine library's per-callback INFO lines about the SDK's own machines stay
out of the application's logs while other machines keep theirs."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from transitions.extensions.nesting import HierarchicalMachine

from avatar_sdk.logs import (
    MACHINE_NAME,
    MACHINE_NOISE,
    NOISY_LOGGERS,
    install,
    library_log,
    warnings_only,
)
from avatar_sdk.redact import REDACTING_FILTER
from avatar_sdk.session.core.machine import SessionMachine, transition_log_level

ROOT = Path(__file__).resolve().parents[2]


def _transitions_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("transitions")]


def _machine(name: str) -> HierarchicalMachine:
    return HierarchicalMachine(
        states=["idle", "running"],
        transitions=[["go", "idle", "running"]],
        initial="idle",
        name=name,
    )


def test_sdk_machine_info_lines_are_dropped_other_machines_keep_theirs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    install()
    caplog.set_level(logging.DEBUG)
    sdk = _machine(MACHINE_NAME)
    sdk.go()  # type: ignore[attr-defined]
    assert _transitions_records(caplog) == []

    other = _machine("billing")
    other.go()  # type: ignore[attr-defined]
    kept = _transitions_records(caplog)
    assert kept, "another application's machine must keep its INFO lines"
    assert all(r.getMessage().startswith("billing: ") for r in kept)


def test_warnings_of_the_sdk_machine_still_pass() -> None:
    record = logging.LogRecord(
        "transitions.core",
        logging.WARNING,
        __file__,
        1,
        "%sSkip %s",
        (MACHINE_NAME + ": ", "x"),
        None,
    )
    assert MACHINE_NOISE.filter(record)
    record.levelno = logging.INFO
    assert not MACHINE_NOISE.filter(record)


def test_install_is_idempotent_and_changes_no_level() -> None:
    install()
    install()
    for name in NOISY_LOGGERS:
        logger = logging.getLogger(name)
        assert logger.filters.count(MACHINE_NOISE) == 1
        assert logger.level == logging.NOTSET


def test_session_machine_transitions_log_no_info_lines(caplog: pytest.LogCaptureFixture) -> None:
    # DEBUG: the SDK's own line for a transition of the ordinary course is a DEBUG line
    caplog.set_level(logging.DEBUG)
    machine = SessionMachine(strict=True)
    machine.fire("start")
    assert machine.state == "connecting_socket"
    assert _transitions_records(caplog) == []
    # the SDK's own one line per transition is still there
    assert any(r.name == "avatar_sdk.session.core.machine" for r in caplog.records)


def test_warnings_only_drops_info_and_forwards_warnings(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="socketio.client")  # whatever ran before us
    adapter = warnings_only("socketio.client")
    adapter.info("Emitting event %s", "join")
    adapter.warning("odd packet %s", "x")
    records = [r for r in caplog.records if r.name == "socketio.client"]
    assert [(r.levelno, r.getMessage()) for r in records] == [(logging.WARNING, "odd packet x")]


_SNAPSHOT = """
import logging

def snapshot():
    out = {}
    for name, logger in sorted(logging.Logger.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger):
            out[name] = (
                [type(h).__name__ for h in logger.handlers],
                logger.level,
                logger.propagate,
                logger.disabled,
            )
    root = logging.getLogger()
    out["<root>"] = ([type(h).__name__ for h in root.handlers], root.level, True, False)
    return out

def import_every_sdk_module():
    import importlib, pkgutil
    import avatar_sdk
    try:  # the fleet's Ray engine needs the ray extra, not on every interpreter yet
        import ray
    except ModuleNotFoundError:
        ray = None
    for info in pkgutil.walk_packages(avatar_sdk.__path__, "avatar_sdk."):
        if info.name == "avatar_sdk.testing.pytest_plugin":
            continue
        if info.name == "avatar_sdk.fleet.engines.ray" and ray is None:
            continue
        importlib.import_module(info.name)

def changed(before, after):
    return {
        name: (before.get(name), state)
        for name, state in after.items()
        if state != before.get(name, ([], logging.NOTSET, True, False))
    }
"""


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_SNAPSHOT) + textwrap.dedent(code)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_importing_every_module_configures_no_logger() -> None:
    result = _run(
        """
        # the dependencies first: what they do on import is theirs, not ours
        import aiohttp, aioice, aiortc, av, engineio, jsonschema, numpy, socketio, tenacity
        import yaml
        try:  # the fleet's: ray only for its engine (the extra)
            import ray
        except ModuleNotFoundError:
            pass
        import transitions.extensions
        before = snapshot()
        import avatar_sdk
        import_every_sdk_module()
        avatar_sdk.AvatarSession("https://avatar.example", "tok-" + "x" * 20)
        print(changed(before, snapshot()))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "{}"


def test_a_socketio_client_given_warnings_only_configures_nothing() -> None:
    result = _run(
        """
        import socketio
        from avatar_sdk.logs import warnings_only
        before = snapshot()
        socketio.AsyncClient(
            logger=warnings_only("socketio.client"),
            engineio_logger=warnings_only("engineio.client"),
        )
        print(changed(before, snapshot()))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "{}"


def test_every_sdk_logger_scrubs_a_registered_secret() -> None:
    """A logger's filters do not run for its children's records, so a filter on
    ``avatar_sdk`` alone would let ``avatar_sdk.fleet.worker`` print a token: every SDK
    module's logger must scrub on its own."""
    result = _run(
        """
        import io
        from avatar_sdk.redact import register_secret
        import_every_sdk_module()
        secret = "tok-" + "S3CRET" * 4
        register_secret(secret)
        sink = io.StringIO()
        logging.getLogger().addHandler(logging.StreamHandler(sink))
        names = sorted(
            name for name, logger in logging.Logger.manager.loggerDict.items()
            if isinstance(logger, logging.Logger)
            and (name == "avatar_sdk" or name.startswith("avatar_sdk."))
        )
        for name in names:
            logging.getLogger(name).warning("%s says %s", name, secret)
        text = sink.getvalue()
        print(len(names), text.count("<redacted>"), text.count(secret))
        """
    )
    assert result.returncode == 0, result.stderr
    loggers, redacted, leaked = map(int, result.stdout.split())
    assert loggers > 20  # every module's logger was looked at
    assert (redacted, leaked) == (loggers, 0)


def test_library_log_says_at_info_what_nobody_expected(caplog: pytest.LogCaptureFixture) -> None:
    # Issue 33, item 3: a library's warning used to stay a warning when the SDK did not
    # expect it, a bare line on stderr with no logging configured; the SDK tells the end
    # of a connection itself: the library's line is INFO detail (DEBUG when expected).
    caplog.set_level(logging.DEBUG)
    expected = False
    adapter = library_log("avatar_sdk.transport.engineio", lambda: expected)
    adapter.info("Sending packet %s", "PING")  # per-packet chatter: dropped
    adapter.warning("Server sent close packet data %s, aborting", 1000)
    adapter.error("packet queue is empty, aborting")
    expected = True
    adapter.warning("Server sent close packet data %s, aborting", None)
    records = [r for r in caplog.records if r.name == "avatar_sdk.transport.engineio"]
    assert [(r.levelno, r.getMessage()) for r in records] == [
        (logging.INFO, "Server sent close packet data 1000, aborting"),
        (logging.INFO, "packet queue is empty, aborting"),
        (logging.DEBUG, "Server sent close packet data None, aborting"),
    ]
    # the SDK's logger carries the redacting filter, like every SDK module's
    assert REDACTING_FILTER in logging.getLogger("avatar_sdk.transport.engineio").filters


def test_only_noteworthy_transitions_log_at_info() -> None:
    assert transition_log_level("connecting_approving", "connected") == logging.DEBUG
    assert transition_log_level("connected", "disconnecting") == logging.DEBUG
    assert transition_log_level("disconnecting", "ended") == logging.DEBUG
    assert transition_log_level("connected", "reconnecting") == logging.INFO
    assert transition_log_level("reconnecting", "connected") == logging.INFO
    assert transition_log_level("connecting_joining", "failed") == logging.INFO
