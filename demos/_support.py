"""Kept for `bench/janus.py` until it moves into its package: import `planfence.demos.support`."""

from planfence.demos.support import STORE_HELP, DemoStore, Progress, demo_store

__all__ = ["STORE_HELP", "DemoStore", "Progress", "demo_store"]
