"""Testing tools shipped with the SDK: a protocol-faithful staging backend with faults."""

from .brain import Brain
from .faults import Faults
from .media import AsrPeer, AsrStats, StagingMedia, WhepViewer
from .server import Conversation, ReceivedEvent, StagingServer

__all__ = [
    "AsrPeer",
    "AsrStats",
    "Brain",
    "Conversation",
    "Faults",
    "ReceivedEvent",
    "StagingMedia",
    "StagingServer",
    "WhepViewer",
]
