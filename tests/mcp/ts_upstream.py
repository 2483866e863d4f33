"""The test upstream (upstream_server.py) with two more tools that declare no output schema, so
the TypeScript-client tests cover tools with and without one:

- `reserve`: gated like `book` (same scope), answers with text only;
- `note`: ungated, answers with text only.
"""

from __future__ import annotations

import argparse
import json
import os
import warnings
from pathlib import Path

from mcp.shared.exceptions import MCPDeprecationWarning
from upstream_server import EFFECTS_ENV, build  # run as a script: its folder is on sys.path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--effects", default=os.environ.get(EFFECTS_ENV))
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    warnings.simplefilter("ignore", MCPDeprecationWarning)
    effects = Path(args.effects) if args.effects else None
    server = build(effects)

    @server.tool(description="Reserve a trip (text result only).", structured_output=False)
    def reserve(destination: str, trip: str) -> str:
        if effects is not None:
            with effects.open("a", encoding="utf-8") as f:
                f.write(json.dumps({"event": "reserve", "destination": destination}) + "\n")
        return f"reserved {trip}-{destination}"

    @server.tool(description="Return the text (text result only).", structured_output=False)
    def note(text: str) -> str:
        return text

    if args.transport == "http":
        server.run("streamable-http", host="127.0.0.1", port=args.port)
    else:
        server.run()


if __name__ == "__main__":
    main()
