"""The client-side tools' pure rules: call tracking (``tracker``: de-duplication, fused calls),
argument schemas (``schema``) and pending acknowledgements (``pending``)."""
