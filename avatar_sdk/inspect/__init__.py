"""``avatar-sdk inspect``: a session as a picture. A cassette or a journal, drawn on a time
axis in one self-contained HTML page (states as bands, each turn with its latency figures,
recoveries by tier, media gaps and stalls, errors, renewals; details on hover).

:mod:`.core` turns records into a timeline model (pure), :mod:`.render` the model into the
page (pure), :mod:`.files` reads the file and writes the page
(:func:`avatar_sdk.inspect.files.inspect_file`).
"""
