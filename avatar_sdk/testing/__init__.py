"""Testing tools shipped with the SDK: a protocol-faithful staging backend with faults."""

from .brain import Brain
from .faults import Faults
from .server import Conversation, ReceivedEvent, StagingServer

__all__ = ["Brain", "Conversation", "Faults", "ReceivedEvent", "StagingServer"]
