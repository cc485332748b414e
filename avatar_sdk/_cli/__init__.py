"""The parts of the ``avatar-sdk`` console script (:mod:`avatar_sdk._cli.main` wires them to click).

Private: the command line is the interface, these modules are not. Each loads the session
stack only when its command runs, so ``avatar-sdk --help`` and ``--version`` stay instant.
"""
