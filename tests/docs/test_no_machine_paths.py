"""No file in the repository points at a place on one particular machine.

A path such as a home folder, a scratch or temporary folder, or a workspace mount works on the
machine it was typed on and nowhere else: data must come from an option, an environment variable
or the code itself. URLs (`file:///...`, `sqlite:////...`), system files (`/dev/null`, `/etc/...`)
and shebangs are not data locations and are allowed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# top-level folders that only exist on some machines (spelled apart, so this file passes itself)
MACHINE_ROOTS = ("work", "root", "home", "tmp", "Users", "mnt", "opt", "scratch", "private")
MACHINE_PATH = re.compile(
    # not inside a URL or a longer path: no word character, dot, slash, colon, tilde or dash
    # right before the leading slash
    r"(?<![\w./:~-])/(?:" + "|".join(MACHINE_ROOTS) + r")/[^\s'\"`)\]]*"
)


def machine_paths(text: str) -> list[str]:
    return [m.group(0) for m in MACHINE_PATH.finditer(text)]


def tracked_files() -> list[Path]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    return [ROOT / name for name in listed.split("\0") if name]


def test_the_pattern_finds_machine_paths_and_leaves_the_rest() -> None:
    slash = "/"
    found = [
        f'DEFAULT = Path("{slash}work/shared/traces")',
        f"python server.py --effects {slash}tmp/effects.jsonl",
        f"open('{slash}home/alice/notes.txt')",
        f"cd {slash}root/project",
    ]
    for line in found:
        assert machine_paths(line), line
    allowed = [
        "print(x, file=open('/dev/null', 'w'))",
        "#!/usr/bin/env bash",
        f"roots=[Root(uri='file://{slash}work/trip')]",
        f"--store sqlite:///{slash}home/me/memory.db",
        "see https://example.org/tmp/page and ./tmp/out.json, ~/tmp/x",
        "if ls /etc/postgresql >/dev/null",
        f"a relative folder: build{slash}tmp/x",
    ]
    for line in allowed:
        assert not machine_paths(line), line


def test_no_tracked_file_names_a_machine_path() -> None:
    hits = []
    for path in tracked_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary or unreadable: not source or docs
        for lineno, line in enumerate(text.splitlines(), 1):
            hits += [f"{path.relative_to(ROOT)}:{lineno}: {p}" for p in machine_paths(line)]
    assert hits == [], "machine paths in the repository:\n" + "\n".join(hits)
