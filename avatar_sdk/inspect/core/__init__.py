"""The pure part of ``avatar-sdk inspect``: records (a journal's lines, a cassette's) turned
into a timeline model, no I/O."""
