"""Benchmarks of avatar_sdk against the bundled staging backend (``python -m benchmarks``).

One module per figure:

* :mod:`benchmarks.connect` - ``connect()`` to ``connected`` on the control plane;
* :mod:`benchmarks.recovery` - socket-tier recovery after a transport drop;
* :mod:`benchmarks.throughput` - ``agent_raw_text`` parse + dispatch rate, pure and end to end;
* :mod:`benchmarks.media` - WebRTC media: ``connect()`` to the first decoded avatar frame,
  client CPU and peak RSS per session, concurrent on-time sessions per process;
* :mod:`benchmarks.resilience` - fault to verified-usable per recovery tier (ASR, STV, cold)
  and detection of a dead downlink and of a silently dead socket;
* :mod:`benchmarks.guards` - per-event cost of the brain guards, ``close()`` to the
  ``session_completed`` POST.

Shared statistics live in :mod:`benchmarks.stats`, the table and ``results.json`` writer
in :mod:`benchmarks.report`. Targets are reported as information only: a missed target
never makes the run fail.
"""

from __future__ import annotations
