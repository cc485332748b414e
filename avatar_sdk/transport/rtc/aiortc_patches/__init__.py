"""Everything that touches aiortc 1.16's private internals, in one place, to be re-checked before
aiortc is unpinned. Each module lists the private names it touches and fails loudly
(``RuntimeError``) when they are not what it was written for:

- ``loop_decode``: the avatar's voice decoded on the event loop, on demand;
- ``video_demand``: the avatar's video decoded only while somebody watches;
- ``video_repair``: NACK retries, the skip past a video packet lost for good, and a frame
  handed on at its last packet (the RTP marker);
- ``sender_reports``: the RTCP sender reports a receiver gets, and a frame's RTP timestamp;
- ``voice_buffer``: the adaptive receive buffer installed in place of the audio jitter buffer.
"""
