"""CrewAI runs in a venv of its own (`.venv-crewai`, see the README): without it these tests skip
with that reason. CrewAI's telemetry is off, and its app data goes to a temporary folder."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

os.environ["CREWAI_DISABLE_TELEMETRY"] = "true"


@pytest.fixture(autouse=True)
def _crewai_data(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("crewai-data")))
        yield
