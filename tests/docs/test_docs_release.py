"""What a user sees of a release: the version (`planfence --version`, `planfence.__version__`,
both from the installed package's metadata), the changelog's entry for it, and the license
shipped with the package."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from importlib.metadata import metadata, version
from pathlib import Path

import planfence

REPO = Path(__file__).resolve().parents[2]


def test_the_version_is_the_package_metadata_s() -> None:
    assert planfence.__version__ == version("planfence")
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", planfence.__version__)


def test_planfence_version_prints_it() -> None:
    program = shutil.which("planfence", path=str(Path(sys.executable).parent))
    assert program, "the planfence program is not installed beside this Python"
    proc = subprocess.run(
        [program, "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"planfence {version('planfence')}\n"


def test_importing_a_subpackage_does_not_read_the_metadata() -> None:
    """`__version__` is read on first use, so `import planfence.fence` stays cheap."""
    code = (
        "import planfence.fence, planfence.shared_memory, planfence\n"
        "assert planfence._version.cache_info().currsize == 0, 'read at import'\n"
        "print(planfence.__version__)\n"
        "assert planfence._version.cache_info().currsize == 1\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == version("planfence")


def test_the_changelog_has_an_entry_for_this_version() -> None:
    text = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "[Keep a Changelog]" in text
    entries = re.findall(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", text, re.M)
    assert entries[0] == ("Unreleased", "")
    released = [v for v, date in entries[1:] if date]
    assert released and released[0] == version("planfence")
    groups = set(re.findall(r"^### (\w+)$", text, re.M))
    assert groups <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}


def test_the_license_ships_with_the_package() -> None:
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert text.lstrip().startswith("Apache License")
    assert "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text
    meta = metadata("planfence")
    assert meta["License-Expression"] == "Apache-2.0"
    assert "LICENSE" in (meta.get_all("License-File") or [])
