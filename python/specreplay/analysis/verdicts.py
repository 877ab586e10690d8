"""Every verdict a figure can get, in one place: a comparison's (a change
between two runs) and an SLO target's (a point's figure against its
objective), and the two they share. The console and the report style and
print these, never their own copies."""

from __future__ import annotations

#: A comparison's: the change's interval lies below zero, above it, or spans it.
FASTER = "faster"
SLOWER = "slower"
SAME = "no significant difference"
#: The server's figures (`servermetrics.compare`): one number per run, no interval.
NOT_RESAMPLED = "not resampled"

#: An SLO target's, in the order a reader cares about them.
HELD = "held"
FAILED = "failed"
UNCERTAIN = "uncertain"

#: Shared: fewer units than the percentile needs; nothing to judge.
TOO_FEW = "too few samples"
NA = "n/a"
