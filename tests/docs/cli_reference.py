"""The CLI reference page (`docs/reference/cli.md`), generated from the `planfence` command's
argument parsers: every command and subcommand, its description, its arguments with their help
text and defaults, as `--help` shows them. `test_docs_cli_reference.py` fails when the page and
the parsers disagree; after changing a command:

    python tests/docs/cli_reference.py --write

The page is built from the parsers' structure, not from `--help`'s layout, so that it reads the
same whichever Python version wrote it. It is rendered with no `PLANFENCE_*` variable set (a
default such as the store URL would otherwise come from the environment of whoever ran it).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "cli.md"

INTRO = """\
# CLI

Every `planfence` command, with each argument's meaning and default, as `planfence COMMAND
--help` prints them. This page is generated from the command's argument parsers.

`planfence --version` prints the installed version. Every command ends a failure with one line
on stderr, `planfence: error: ...`, and exits with 2 for a usage error, 1 for a failure and 130
after Ctrl-C; a closed output pipe (`planfence audit | head`) ends a command quietly with 141.
Set `PLANFENCE_DEBUG=1` to see the traceback of an unexpected error, and `PLANFENCE_STORE` to
choose the store every command opens by default (see [Store URLs](store-urls.md)).

`planfence bench` and `planfence demo` come with the `bench` extra and the bundled demos; a
package can add commands of its own through the `planfence.commands` entry-point group.
"""


def subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser, str]]:
    """(name, parser, one-line help) of each subcommand, in help order."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                out.append((name, sub, helps.get(name, "")))
    return out


def walk(parser: argparse.ArgumentParser) -> Iterator[tuple[argparse.ArgumentParser, str]]:
    """Every parser below `parser` (depth first, in help order), with its one-line help."""
    for _name, sub, text in subcommands(parser):
        yield sub, text
        yield from walk(sub)


def _metavar(action: argparse.Action) -> str:
    if action.metavar is not None:
        m = action.metavar if isinstance(action.metavar, str) else " ".join(action.metavar)
    elif action.choices is not None:
        m = "{" + ",".join(str(c) for c in action.choices) + "}"
    else:
        m = action.dest if not action.option_strings else action.dest.upper()
    return m


def invocation(action: argparse.Action) -> str:
    """`--parents ID [ID ...]`, `-n N`, `key`: how the argument is written."""
    if action.nargs == 0:
        args = ""
    else:
        m = _metavar(action)
        nargs = action.nargs
        if nargs is None:
            args = m
        elif nargs == argparse.OPTIONAL:
            args = f"[{m}]"
        elif nargs == argparse.ZERO_OR_MORE:
            args = f"[{m} ...]"
        elif nargs == argparse.ONE_OR_MORE:
            args = f"{m} [{m} ...]"
        elif nargs == argparse.REMAINDER:
            args = "..."
        elif isinstance(nargs, int):
            args = " ".join([m] * nargs)
        else:
            args = m
    if not action.option_strings:
        return args
    return ", ".join(action.option_strings) + (f" {args}" if args else "")


def help_text(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The help `--help` prints for `action` (its default added as the command's formatter
    adds it), on one line."""
    formatter = parser._get_formatter()
    text = formatter._get_help_string(action) or ""
    if "%" in text:
        params = {k: v for k, v in vars(action).items() if v is not argparse.SUPPRESS}
        params["prog"] = parser.prog
        if params.get("choices") is not None:
            params["choices"] = ", ".join(str(c) for c in params["choices"])
        text = text % params
    return " ".join(text.split())


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _code(text: str) -> str:
    return f"`{text}`" if "`" not in text else f"`` {text} ``"


def section(parser: argparse.ArgumentParser, summary: str) -> list[str]:
    lines = [f"## {parser.prog}", ""]
    about = " ".join((parser.description or summary or "").split())
    if about:
        lines += [about, ""]
    subs = subcommands(parser)
    if subs:
        lines += ["| Command | What it does |", "|---|---|"]
        lines += [f"| {_code(sub.prog)} | {_cell(text)} |" for _n, sub, text in subs]
        lines.append("")
    rows = []
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._SubParsersAction):
            continue
        if isinstance(action, argparse._HelpAction):
            continue
        rows.append(f"| {_code(invocation(action))} | {_cell(help_text(parser, action))} |")
    if rows:
        lines += ["| Argument | Meaning |", "|---|---|", *rows, ""]
    if parser.epilog:
        lines += [" ".join(parser.epilog.split()), ""]
    return lines


def render() -> str:
    """The page, from the parsers of this process (whose `PLANFENCE_*` variables show up in
    the defaults: run it as a script, which clears them)."""
    from planfence.adapters.cli.main import build_parser

    top = build_parser()
    lines = [INTRO, *section(top, "")]
    for parser, summary in walk(top):
        lines += section(parser, summary)
    return "\n".join(lines).rstrip("\n") + "\n"


if __name__ == "__main__":
    for name in [n for n in os.environ if n.startswith("PLANFENCE_")]:
        del os.environ[name]
    text = render()
    if "--write" in sys.argv:
        PAGE.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
