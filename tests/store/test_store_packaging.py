"""Packaging: every package folder is installed under `planfence.*`, nothing at top level."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
TOP_LEVEL = ("shared_memory", "plugins", "adapters", "demos")
# Packages installed under a name of their own, from a folder inside a top-level one.
MAPPED = {"planfence.fence": "plugins/fence", "planfence": "plugins/planfence"}


def test_package_dirs_map_to_planfence() -> None:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert data["tool"]["setuptools"]["package-dir"] == {
        **{f"planfence.{name}": name for name in TOP_LEVEL},
        **MAPPED,
    }


def test_every_package_folder_is_installed_under_planfence() -> None:
    """setup.py finds the packages: each folder with an `__init__.py` imports as `planfence.*`
    from that folder, with no list to keep (a new adapter's folder is found as it is)."""
    found = {}
    for top in TOP_LEVEL:
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT)
            if any(part.startswith(".") or part == "__pycache__" for part in rel.parts):
                continue
            mapped = [n for n, folder in MAPPED.items() if rel == Path(folder)]
            found[mapped[0] if mapped else "planfence." + ".".join(rel.parts)] = init
    assert "planfence.shared_memory.backends" in found
    for name, init in sorted(found.items()):
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None, name
        assert Path(spec.origin).resolve() == init.resolve(), name


@pytest.mark.parametrize("name", TOP_LEVEL)
def test_no_top_level_module(tmp_path: Path, name: str) -> None:
    code = (
        "import importlib.util, sys; "
        f"spec = importlib.util.find_spec({name!r}); "
        "sys.exit(0 if spec is None else 'importable from ' + str(spec.origin))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


def test_planfence_namespace_imports(tmp_path: Path) -> None:
    code = (
        "import planfence.shared_memory as m, planfence.shared_memory.backends.sqlite, "
        "planfence.adapters.cli.memory, planfence.demos.bench.cli, planfence.fence; "
        "print(m.__file__)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).parent == ROOT / "shared_memory"


def test_py_typed_everywhere() -> None:
    for top in TOP_LEVEL:
        assert (ROOT / top / "py.typed").exists(), top
    assert (ROOT / "shared_memory" / "backends" / "py.typed").exists()


def _extras() -> dict[str, list[str]]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras: dict[str, list[str]] = data["project"]["optional-dependencies"]
    return extras


def _names(requirements: list[str]) -> set[str]:
    """Distribution names, with `planfence[a,b]` expanded into what those extras list."""
    extras = _extras()
    found: set[str] = set()
    for req in requirements:
        name = re.split(r"[\s\[<>=!~;]", req, maxsplit=1)[0].lower()
        if name == "planfence":
            inner = req[req.index("[") + 1 : req.index("]")]
            for extra in inner.split(","):
                found |= _names(extras[extra.strip()])
        else:
            found.add(name)
    return found


def test_the_base_install_is_small() -> None:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    core = {re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0] for r in data["project"]["dependencies"]}
    assert core == {"pydantic", "httpx", "cryptography", "tomli"}


def test_extras_carry_numpy_starlette_uvicorn_and_rich() -> None:
    assert _names(_extras()["janus"]) == {"numpy"}
    assert _names(_extras()["http"]) == {"starlette", "uvicorn"}
    assert {"starlette", "uvicorn"} <= _names(_extras()["mcp"])
    assert "numpy" in _names(_extras()["embeddings"])
    assert {"numpy", "starlette", "uvicorn", "rich", "matplotlib"} <= _names(_extras()["bench"])
    # `all` still installs everything it did when these four were core dependencies.
    assert {
        "numpy", "starlette", "uvicorn", "rich", "psycopg", "autogen-agentchat", "langgraph",
        "mcp", "pyjwt", "matplotlib", "opentelemetry-api", "wordllama", "pydantic-ai-slim",
        "openai-agents", "agent-framework-core", "a2a-sdk", "agent-coherence",
    } <= _names(_extras()["all"])  # fmt: skip


def test_every_extra_a_hint_names_is_declared() -> None:
    from planfence.shared_memory.extras import EXTRA_MODULES

    assert set(EXTRA_MODULES) <= set(_extras())
