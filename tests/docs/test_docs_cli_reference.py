"""The CLI reference page says what `planfence ... --help` says.

The page is what `cli_reference.py` generates from the parsers now (run with no `PLANFENCE_*`
variable, as the script runs), and each command's section names exactly the arguments and
subcommands its `--help` lists: the real `planfence` program's for a few commands, and every
parser's own help text for all of them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_reference import PAGE

HERE = Path(__file__).resolve().parent
OPTION = re.compile(r"(?<![\w$-])(--?[A-Za-z][\w-]*)")


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLANFENCE_")}
    env["COLUMNS"] = "100"
    return env


def run(*argv: str) -> str:
    proc = subprocess.run(
        argv, capture_output=True, text=True, env=clean_env(), timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def sections(text: str) -> dict[str, str]:
    """The page's `## planfence ...` sections by command."""
    parts = re.split(r"^## (planfence\b.*)$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def page_options(section: str) -> set[str]:
    """Option strings in the section's argument table (its first column)."""
    found: set[str] = set()
    for row in re.findall(r"^\| `(.+?)` \|", section, re.M):
        found |= set(OPTION.findall(row.split(" ", 1)[0] if not row.startswith("-") else row))
    return {o for o in found if o.startswith("-")}


def help_options(text: str) -> set[str]:
    """Option strings `--help` lists (each option line starts with one), without -h/--help."""
    found: set[str] = set()
    for line in text.splitlines():
        m = re.match(r"^\s{2}(-[^ ].*?)(?:\s{2,}|$)", line)
        if m:
            found |= set(OPTION.findall(m.group(1)))
    return found - {"-h", "--help"}


def test_the_page_is_what_the_parsers_generate() -> None:
    now = run(sys.executable, str(HERE / "cli_reference.py"))
    assert PAGE.read_text(encoding="utf-8") == now, (
        "docs/reference/cli.md differs from the parsers: run "
        "`python tests/docs/cli_reference.py --write` and review the diff"
    )


def test_every_command_on_the_page_and_its_help_name_the_same_arguments() -> None:
    """Every parser's `--help` text (as `print_help` prints it) against the page's section."""
    script = (
        "import argparse\n"
        "from cli_reference import walk\n"
        "from planfence.adapters.cli.main import build_parser\n"
        "top = build_parser()\n"
        "for p in [top, *(p for p, _ in walk(top))]:\n"
        "    print('\\x00' + p.prog)\n"
        "    print(p.format_help())\n"
    )
    env = {**clean_env(), "PYTHONPATH": str(HERE)}
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    helps = dict(chunk.split("\n", 1) for chunk in out.stdout.split("\x00")[1:])
    page = sections(PAGE.read_text(encoding="utf-8"))
    assert set(page) == set(helps), set(page) ^ set(helps)
    assert len(helps) > 30  # every command and subcommand, bench and demo included
    for prog, text in helps.items():
        assert page_options(page[prog]) == help_options(text), prog
        listed = text.split("positional arguments:", 1)[-1].split("\n\n")[0]
        for name in re.findall(r"^ {4}(\w[\w-]*)", listed, re.M):  # subcommands
            assert f"| `{prog} {name}` |" in page[prog], (prog, name)
        for name in re.findall(r"^ {2}([a-z][\w-]*)", listed, re.M):  # positional arguments
            assert re.search(rf"^\| `{name}\b", page[prog], re.M), (prog, name)


@pytest.mark.parametrize(
    "argv",
    [(), ("memory", "put"), ("policy", "lint"), ("proxy",), ("demo", "quickstart")],
    ids=lambda a: " ".join(a) or "planfence",
)
def test_the_installed_program_prints_what_the_page_says(argv: tuple[str, ...]) -> None:
    program = shutil.which("planfence", path=str(Path(sys.executable).parent))
    assert program, "the planfence program is not installed beside this Python"
    text = run(program, *argv, "--help")
    prog = " ".join(("planfence", *argv))
    section = sections(PAGE.read_text(encoding="utf-8"))[prog]
    assert page_options(section) == help_options(text)
    for line in section.splitlines():  # each help text the page shows, --help shows too
        m = re.match(r"^\| `-.+?` \| (.+) \|$", line)
        if m:
            words = m.group(1).replace("\\|", "|").split()
            assert " ".join(words) in " ".join(text.split()), (prog, m.group(1))
