"""The Socket.IO control channel: ``control`` (one channel per server session attempt) over
``csr`` (python-socketio with connection-state recovery), and ``frame_guard`` (the frame checks
that keep malformed frames away from python-engineio and python-socketio)."""
