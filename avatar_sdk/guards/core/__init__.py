"""The guards' pure arithmetic: the tool-call spiral breaker (``spiral``) and the brain-stall
watchdog (``watchdogs``), on an injected clock."""
