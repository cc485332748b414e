"""Testing tools shipped with the SDK: a protocol-faithful staging backend with faults."""

from ..clock import FakeClock
from .brain import Brain
from .conversation import Conversation, ReceivedEvent
from .faults import Faults
from .media import AsrPeer, AsrStats, StagingMedia, WhepViewer
from .server import StagingServer
from .synthetic import read_frame_counter

__all__ = [
    "AsrPeer",
    "AsrStats",
    "Brain",
    "Conversation",
    "FakeClock",
    "Faults",
    "ReceivedEvent",
    "StagingMedia",
    "StagingServer",
    "WhepViewer",
    "read_frame_counter",
]
