"""`python -m planfence.adapters.cli ...` runs the `planfence` command."""

import sys

from .main import main

sys.exit(main())
