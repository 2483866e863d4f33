"""Command-line pieces that sit on the adapters layer (memory, plan, audit, serve-owner, proxy).

The `planfence` entry point itself lives in `planfence.demos.cli`, the outermost layer, because it
also runs demos and benchmarks.
"""
