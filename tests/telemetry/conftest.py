"""The `otel` fixture: in-memory OpenTelemetry SDK providers for one test (otel_helpers.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture
def otel() -> Iterator[Any]:
    from otel_helpers import collected  # skips the test without the OpenTelemetry SDK

    yield from collected()
