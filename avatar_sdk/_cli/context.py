"""The click context settings every ``avatar-sdk`` command shares (``-h`` as ``--help``,
help text 100 columns wide), in one place so the commands cannot drift apart."""

from __future__ import annotations

from typing import Any, Final

CONTEXT: Final[dict[str, Any]] = {
    "help_option_names": ["-h", "--help"],
    "max_content_width": 100,
}
