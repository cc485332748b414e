"""Pure liveness rules (no I/O, times passed in): the uplink's receiver-report cadence
(``cadence``), a channel judged down and why (``channel_down``), the downlink's video rule
(``video_stall``), connection quality from stats reports (``quality``) and host network
changes judged from netlink messages (``netchange``)."""
