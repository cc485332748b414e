"""Testing tools shipped with the SDK: a protocol-faithful staging backend with faults (also
in a child process, :class:`StagingProcess`, for load runs), a network lab in kernel
namespaces (:class:`NetworkLab`), the
pytest plugin's helpers (:func:`expect_events`), and a fake clock.

Names load on first use (PEP 562), so the pytest plugin, which lives in this package, costs
next to nothing in a project that never asks for a staging backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from ..clock import FakeClock
    from .expect import EventSequence, expect_events
    from .netlab import NetworkLab
    from .process import StagingProcess
    from .replay import Divergence, ReplayResult, ReplayServer, replay_cassette
    from .staging.brain import Brain
    from .staging.conversation import Conversation, ReceivedEvent
    from .staging.faults import Faults
    from .staging.media import AsrPeer, AsrStats, StagingMedia, WhepViewer
    from .staging.server import StagingServer
    from .synthetic import read_frame_counter, read_media_time

#: Public name -> the module that defines it (relative to this package).
_EXPORTS: dict[str, str] = {
    "AsrPeer": ".staging.media",
    "AsrStats": ".staging.media",
    "Brain": ".staging.brain",
    "Conversation": ".staging.conversation",
    "Divergence": ".replay",
    "EventSequence": ".expect",
    "FakeClock": "..clock",
    "Faults": ".staging.faults",
    "NetworkLab": ".netlab",
    "ReceivedEvent": ".staging.conversation",
    "ReplayResult": ".replay",
    "ReplayServer": ".replay",
    "StagingMedia": ".staging.media",
    "StagingProcess": ".process",
    "StagingServer": ".staging.server",
    "WhepViewer": ".staging.media",
    "expect_events": ".expect",
    "read_frame_counter": ".synthetic",
    "read_media_time": ".synthetic",
    "replay_cassette": ".replay",
}

__all__ = [
    "AsrPeer",
    "AsrStats",
    "Brain",
    "Conversation",
    "Divergence",
    "EventSequence",
    "FakeClock",
    "Faults",
    "NetworkLab",
    "ReceivedEvent",
    "ReplayResult",
    "ReplayServer",
    "StagingMedia",
    "StagingProcess",
    "StagingServer",
    "WhepViewer",
    "expect_events",
    "read_frame_counter",
    "read_media_time",
    "replay_cassette",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
