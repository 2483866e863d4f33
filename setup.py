"""Finds planfence's packages: every folder with an `__init__.py` under the four top-level folders
installs as `planfence.<folder>.<...>` (pyproject.toml maps the folders), so a new package, an
adapter for instance, needs no list edited."""

from pathlib import Path

from setuptools import setup

TOP_LEVEL = ("shared_memory", "plugins", "adapters", "demos")
# Installed under a name of its own (pyproject.toml's package-dir), not under its folder's.
MAPPED = {Path("plugins/fence"): "planfence.fence", Path("plugins/planfence"): "planfence"}


def packages() -> list[str]:
    found = []
    for top in TOP_LEVEL:
        for init in sorted(Path(top).rglob("__init__.py")):
            folder = init.parent
            if any(p.startswith(".") or p == "__pycache__" for p in folder.parts):
                continue
            found.append(MAPPED.get(folder) or "planfence." + ".".join(folder.parts))
    return found


if __name__ == "__main__":
    setup(packages=packages())
