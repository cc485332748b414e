"""The session's pure rules (no I/O, no asyncio, times passed in): the state machine and its
triggers (``machine``), its pure neighbours (``decisions``, ``capacity``, ``clock_jump``,
``health``, ``diagram``), the inbound router, the turn ledger (``turns``), reply matching
(``reply_match``), the retry budgets, the renewal arithmetic, a recovery's ``outcome`` and the
counters (``stats``). ``tests/unit/test_layering.py`` holds every module here to that."""
