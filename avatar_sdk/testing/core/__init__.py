"""The testing tools' pure parts: matching what a client sends against a recording
(``replay_match``)."""
