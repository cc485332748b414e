"""Ending ``talk --voice``'s process without finalizing the interpreter.

Why: the voice path runs native libraries whose own threads call into Python: livekit's FFI
(the echo canceller; a tokio runtime whose workers hand the native logs to a Python
callback) and PortAudio (the speaker and the microphone). While the interpreter finalizes,
CPython before 3.14 ends a foreign thread that asks for the GIL with ``pthread_exit``, and a
Rust frame unwound that way aborts the whole process. Seen once in about fifteen runs of the
voice CLI test under load: the session had closed cleanly, then the exit was -6 (SIGABRT)
instead of 130, with ``thread 'tokio-rt-worker' panicked at /rustc/...`` on stderr, a panic
raised in Rust's standard library, not in livekit's code.

By the time a command returns its exit code its work is done, so :func:`leave_process` does
what a normal exit would do for the program (the exit handlers run, livekit's own disposal
and a telemetry flush among them, and the standard streams are flushed) and then ends the
process with ``os._exit``, skipping only the finalization those threads race with.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
from typing import NoReturn


def leave_process(code: int) -> NoReturn:
    """Run the exit handlers, flush, and end the process with ``code`` (no finalization)."""
    # atexit's own runner: the handlers run in order, each error printed, none skipped.
    atexit._run_exitfuncs()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        # A reader gone (broken pipe) or a stream closed: nothing can carry a message about
        # it but the stream itself, and the exit code still has to go out.
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
