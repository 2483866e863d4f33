"""What Janus writes to the store is recognised by: record kinds and the decision source. A
viewer of the store (the UI) reads them without loading the controller."""

from __future__ import annotations

KIND_CANDIDATE = "janus-candidate"
KIND_STATE = "janus-state"
DECISION_SOURCE = "janus"
