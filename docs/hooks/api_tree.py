"""An MkDocs hook: lets mkdocstrings find `planfence.*` in the source tree.

The repository's folders install under one import namespace (`planfence.shared_memory` is
`shared_memory/`, `planfence.fence` is `plugins/fence/`: setuptools' `package-dir`), a mapping
griffe cannot follow. So, as the API snapshot test and the type check do, the build reads a
temporary tree of symlinks, `planfence/<name> -> <folder>` (and `planfence/__init__.py`, which
lives in `plugins/planfence/`), put first on the Python handler's
search paths. The tree lasts as long as the build.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path
from typing import Any

from mkdocs.plugins import event_priority

ROOT = Path(__file__).resolve().parents[2]
# The import name under `planfence.` -> the folder it installs from.
FOLDERS = {
    "shared_memory": "shared_memory",
    "plugins": "plugins",
    "fence": "plugins/fence",
    "adapters": "adapters",
    "demos": "demos",
}


def source_tree() -> str:
    """A fresh folder holding `planfence/` as symlinks into the repository; removed at exit."""
    tree = Path(tempfile.mkdtemp(prefix="planfence-docs-"))
    atexit.register(shutil.rmtree, tree, ignore_errors=True)
    (tree / "planfence").mkdir()
    (tree / "planfence" / "__init__.py").symlink_to(ROOT / "plugins" / "planfence" / "__init__.py")
    for name, folder in FOLDERS.items():
        (tree / "planfence" / name).symlink_to(ROOT / folder, target_is_directory=True)
    return str(tree)


# Before mkdocstrings' own `on_config`, which starts the Python handler with its search paths.
@event_priority(100)
def on_config(config: Any) -> Any:
    python = config.plugins["mkdocstrings"].config.handlers.setdefault("python", {})
    python["paths"] = [source_tree(), *python.get("paths", [])]
    return config
