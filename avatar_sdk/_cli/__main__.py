"""``python -m avatar_sdk._cli``: the same as the ``avatar-sdk`` console script."""

import sys

from .interrupts import install

install()  # first: a Ctrl-C in the imports below exits 130 quietly

try:
    from .main import main
except KeyboardInterrupt:  # Ctrl-C while the command line loads: 130, quietly
    sys.exit(130)

if __name__ == "__main__":
    main(prog_name="avatar-sdk")
