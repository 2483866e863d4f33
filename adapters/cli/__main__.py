"""`python -m planfence.adapters.cli ...` runs the `planfence` command."""

import sys

from .entry import run

sys.exit(run())
