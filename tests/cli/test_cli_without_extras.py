"""The base install (pydantic, httpx, cryptography) runs the store, the gate and the core
commands; a part that needs an extra (numpy, Starlette, uvicorn, rich) fails when it is used,
with one line naming the extra to install.

Each check runs in a fresh interpreter whose import system refuses those modules, as an
environment without them would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

OPTIONAL = ("numpy", "starlette", "uvicorn", "rich")

BLOCKER = f"""
import sys


class _Absent:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {OPTIONAL!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, _Absent())
"""

CLI = BLOCKER + "from planfence.adapters.cli.main import main\nsys.exit(main())\n"

POLICY = """
[tools.ship_order]
depends_on = ["order/{order_id}"]
"""


def python(code: str, *argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PLANFENCE_DEBUG", "PLANFENCE_STORE")}
    return subprocess.run(
        [sys.executable, "-c", code, *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def planfence(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return python(CLI, *argv, cwd=tmp_path)


def test_the_blocker_hides_the_optional_modules(tmp_path: Path) -> None:
    code = BLOCKER + "import numpy\n"
    done = python(code, cwd=tmp_path)
    assert done.returncode == 1
    assert "No module named 'numpy'" in done.stderr


def test_core_modules_import_without_the_optional_dependencies(tmp_path: Path) -> None:
    code = BLOCKER + (
        "import planfence.shared_memory, planfence.shared_memory.backends.sqlite\n"
        "import planfence.plugins.gate, planfence.fence, planfence.plugins.telemetry\n"
        "import planfence.plugins.janus, planfence.plugins.janus.memory\n"
        "import planfence.plugins.janus.errors, planfence.plugins.janus.kinds\n"
        "import planfence.adapters.owner_service, planfence.adapters.ui\n"
        "import planfence.adapters.cli.main, planfence.demos.bench.cli, planfence.demos.demo_cli\n"
        "from planfence.adapters.owner_service import HttpOwnerHeads, SigningKey\n"
        "from planfence.fence import FenceToken\n"
        "from planfence.plugins.gate import Gate, Policy\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {OPTIONAL!r}))\n"
    )
    done = python(code, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_core_commands_run_without_the_optional_dependencies(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'team.db'}"
    (tmp_path / "policy.toml").write_text(POLICY)
    steps: list[tuple[str, ...]] = [
        ("--help",),
        ("bench", "--help"),
        ("memory", "own", "order/o1", "--owner", "sales", "--store", store),
        ("memory", "keys", "--store", store, "--json"),
        ("policy", "check", "policy.toml"),
        ("keys", "generate", "--agent", "planner", "--out", "keys"),
        ("check", "ship_order", "--args", '{"order_id": "o1"}', "--policy", "policy.toml"),
        ("audit", "--store", store),
        ("demo", "quickstart"),
    ]
    for argv in steps:
        if argv[0] == "check":
            argv = (*argv, "--store", store, "--json")
        done = planfence(tmp_path, *argv)
        # `check` without --plan: the gate would block the call (missing_plan), exit status 4
        assert done.returncode == (4 if argv[0] == "check" else 0), (argv, done.stderr)
    put = ("memory", "put", "order/o1", "--as", "sales", "--value", '{"n": 1}', "--json")
    fact = json.loads(planfence(tmp_path, *put, "--store", store).stdout)["id"]
    plan = ("plan", "create", "--as", "planner", "--parents", fact, "--store", store)
    done = planfence(tmp_path, *plan)
    assert done.returncode == 0, done.stderr
    keys = json.loads(planfence(tmp_path, "memory", "keys", "--store", store, "--json").stdout)
    assert "order/o1" in [k["key"] for k in keys]
    assert (tmp_path / "keys" / "keyring.jwks").exists()


@pytest.mark.parametrize(
    ("argv", "extra"),
    [
        (("ui", "--port", "0"), "http"),
        (("serve-owner", "--agent", "sales", "--port", "0"), "http"),
        (("proxy", "--policy", "policy.toml", "--", sys.executable, "-c", "pass"), "mcp"),
        (("bench", "janus", "--quick"), "janus"),
        (("bench", "janus", "--help"), "janus"),
        (("bench", "gate", "--quick"), "bench"),
        (("bench", "replay", "--quick"), "bench"),
        (("bench", "window", "--quick"), "bench"),
    ],
    ids=lambda value: " ".join(value[:3]) if isinstance(value, tuple) else value,
)
def test_a_part_that_needs_an_extra_names_it_in_one_line(
    tmp_path: Path, argv: tuple[str, ...], extra: str
) -> None:
    store = f"sqlite:///{tmp_path / 'team.db'}"
    (tmp_path / "policy.toml").write_text(POLICY)
    owned = planfence(tmp_path, "memory", "own", "order/o1", "--owner", "sales", "--store", store)
    assert owned.returncode == 0, owned.stderr
    if argv[0] in ("ui", "serve-owner"):
        argv = (*argv, "--store", store)
    done = planfence(tmp_path, *argv)
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("planfence: error: ")
    assert line.endswith(f"needs the '{extra}' extra: pip install 'planfence[{extra}]'")


@pytest.mark.parametrize(
    ("statement", "extra"),
    [
        ("from planfence.plugins.janus import JanusController", "janus"),
        ("from planfence.plugins.janus.controller import JanusController", "janus"),
        ("from planfence.plugins.janus import HashingEncoder", "janus"),
        ("from planfence.adapters.langgraph import JanusStore", "janus"),
        ("from planfence.adapters.ui import create_app", "http"),
        ("from planfence.adapters.owner_service.server import create_app", "http"),
        ("import planfence.demos.bench.window.report", "bench"),
    ],
)
def test_using_a_part_that_needs_an_extra_raises_its_hint(
    tmp_path: Path, statement: str, extra: str
) -> None:
    code = BLOCKER + (
        "from planfence.shared_memory import MissingExtraError\n"
        "try:\n"
        f"    {statement}\n"
        "except MissingExtraError as exc:\n"
        "    print(exc.extra, exc)\n"
    )
    done = python(code, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{extra} ")
    assert done.stdout.strip().endswith(f"pip install 'planfence[{extra}]'")


def test_progress_without_rich_prints_plain_lines(tmp_path: Path) -> None:
    code = BLOCKER + (
        "from planfence.demos.support import Progress\n"
        "with Progress('demo', 2, stream=sys.stdout, bar=True) as progress:\n"
        "    progress.advance('one')\n"
        "    progress.advance('two')\n"
    )
    done = python(code, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["demo: 1/2 one", "demo: 2/2 two"]
