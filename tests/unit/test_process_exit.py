"""``talk --voice`` ends its process without finalizing the interpreter (where native
threads calling into Python abort it), yet like a normal exit for the program: the exit
handlers run, buffered output reaches the pipe, the exit code is the command's."""

from __future__ import annotations

import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(
    """
    import atexit, sys
    from avatar_sdk._cli.process_exit import leave_process

    class Finalized:
        def __del__(self):
            sys.stderr.write("finalized\\n")

    KEPT = Finalized()        # collected only when the interpreter finalizes
    atexit.register(lambda: print("exit handler ran"))
    print("a line still in the buffer", end="")
    leave_process(130)
    """
)


def test_the_exit_handlers_run_the_output_is_flushed_and_nothing_is_finalized() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 130, done.stderr
    assert done.stdout == "a line still in the bufferexit handler ran\n"
    assert "finalized" not in done.stderr  # the interpreter was not finalized
