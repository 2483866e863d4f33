"""DSPy's global settings (`dspy.configure`) are undone after each test."""

from __future__ import annotations

from collections.abc import Iterator

import dspy
import pytest


@pytest.fixture(autouse=True)
def dspy_settings() -> Iterator[None]:
    """Whatever a test configured globally (`dspy.configure`) is undone after it."""
    yield
    dspy.configure(lm=None)
