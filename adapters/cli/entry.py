"""The `planfence` console script. Ctrl-C while the command is still starting (importing what
it runs) is answered as once it runs: one error line and exit status 130, not a traceback."""

from __future__ import annotations

import sys

from .exits import EXIT_INTERRUPTED


def run() -> int:
    try:
        from .main import main
    except KeyboardInterrupt:
        sys.stderr.write("planfence: error: interrupted\n")
        return EXIT_INTERRUPTED
    return main()
