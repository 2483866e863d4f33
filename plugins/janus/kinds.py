"""What Janus writes to the store is recognised by: record kinds and the decision source. A
viewer of the store (the UI) reads them without loading the controller."""

from __future__ import annotations

KIND_CANDIDATE = "janus-candidate"
KIND_STATE = "janus-state"
DECISION_SOURCE = "janus"
VERDICT_LABEL = "verdict"
"""The journal label Janus files its deploy/keep under: the one the gate's decision log reads
verdicts from, so a query by verdict finds a deploy as it finds a gate's allow."""
