"""CrewAI runs in a venv of its own (`.venv-crewai`, see docs/frameworks/crewai.md): without it
these tests skip with that reason. CrewAI's telemetry is off, and its own files (credentials,
settings, app data, which it keeps under the home directory whatever `XDG_DATA_HOME` says) go
to a temporary folder set as the home before CrewAI is imported."""

from __future__ import annotations

import os

from planfence.adapters.crewai.conformance import private_home

os.environ["CREWAI_DISABLE_TELEMETRY"] = "true"
private_home()
