"""Haystack's usage telemetry is off (it would write a user id under the home directory and try
to reach its collector) before Haystack is imported."""

from __future__ import annotations

import os

os.environ["HAYSTACK_TELEMETRY_ENABLED"] = "False"
