"""``file_source``: the audio of any media file FFmpeg reads, as an uplink source.

Decoded on aiortc's ``MediaPlayer`` thread and normalized to 48 kHz mono 20 ms frames, except
a local Ogg/Opus file, which is sent undecoded (:class:`~.encoded.OpusFileSource`).
"""

from __future__ import annotations

import os

import av
from aiortc.contrib.media import MediaPlayer
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from ..errors import AvatarError, ErrorCode
from .encoded import opus_file_or_none
from .fileopen import check_local_file, display, is_ogg_name, open_error
from .normalize import Normalizer

__all__ = ["file_source"]


class _FileAudioTrack(MediaStreamTrack):
    """A MediaPlayer's audio, normalized; owns the player and closes it on ``stop()``."""

    kind = "audio"

    def __init__(self, player: MediaPlayer, inner: MediaStreamTrack) -> None:
        super().__init__()
        self._player: MediaPlayer | None = player
        self._inner = inner
        self._normalizer = Normalizer()

    async def recv(self) -> av.AudioFrame:
        return await self._normalizer.next_frame(self, self._refill)

    async def _refill(self) -> None:
        try:
            got = await self._inner.recv()
        except MediaStreamError:
            self.stop()  # end of file: release the player now
            raise
        if isinstance(got, av.AudioFrame):
            self._normalizer.push(got)

    def stop(self) -> None:
        super().stop()
        if self._player is not None:
            self._player = None
            self._inner.stop()  # joins the decoder thread, closes the container


def _drop_video(player: MediaPlayer) -> None:
    """Keep the player from decoding video nobody reads (it would queue without bound).

    MediaPlayer has no stream selection, so this edits its private stream list; aiortc is
    pinned exactly and ``test_file_source_ignores_video`` guards the attribute names.
    """
    if player.video is None:
        return
    streams = getattr(player, "_MediaPlayer__streams", None)
    if not isinstance(streams, list) or not hasattr(player, "_MediaPlayer__video"):
        raise RuntimeError("aiortc MediaPlayer internals changed: cannot drop video")
    streams[:] = [s for s in streams if s.type != "video"]
    player._MediaPlayer__video = None


def file_source(
    path_or_url: str | os.PathLike[str], *, loop: bool = False, timeout: int = 10
) -> MediaStreamTrack:
    """Play the audio of a media file or URL as an uplink source (any format FFmpeg reads).

    The audio is decoded on aiortc's player thread, paced in real time and normalized to
    48 kHz mono 20 ms frames; video in the file is ignored. ``loop=True`` restarts at the
    end (seekable files only); otherwise the track ends (``MediaStreamError``) at the end
    of the file and releases it. ``stop()`` releases it early.

    A local ``.opus``/``.ogg``/``.oga`` file whose audio is mono or stereo Opus is not
    decoded at all: the result is an :class:`~avatar_sdk.media.OpusFileSource`, which
    yields the file's Opus packets (``av.Packet``, not ``AudioFrame``) for the uplink to
    send as they are. Ogg Vorbis/FLAC and multichannel Opus are decoded as above.

    Raises ``AvatarError``: ``device_not_found`` for a missing file (or URL),
    ``permission_denied`` when it may not be read, ``invalid_argument`` for a file with no
    audio or that FFmpeg cannot parse.
    """
    target = os.fspath(path_or_url)
    shown = display(target)
    if "://" not in target:
        check_local_file(target, shown)
        if is_ogg_name(target):
            opus = opus_file_or_none(target, loop=loop)
            if opus is not None:
                return opus
    try:
        player = MediaPlayer(target, loop=loop, timeout=timeout)
    except AssertionError:  # MediaPlayer asserts seekability for loop=True
        raise AvatarError(
            ErrorCode.INVALID_ARGUMENT, f"{shown}: loop=True needs a seekable file"
        ) from None
    except Exception as exc:
        raise open_error(exc, shown) from exc
    audio = player.audio
    if audio is None:
        if player.video is not None:
            player.video.stop()  # closes the container
        raise AvatarError(ErrorCode.INVALID_ARGUMENT, f"{shown} has no audio stream")
    _drop_video(player)
    return _FileAudioTrack(player, audio)
