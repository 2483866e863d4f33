"""`planfence policy check FILE`: validate a policy, and compare it with an upstream's tools;
`planfence policy init`: write a first, commented policy from an upstream's tool listing.

    planfence policy check policy.toml
    planfence policy check policy.toml --tools-from-upstream -- uvx mcp-server-git --repository .
    planfence policy check policy.toml --upstream-url http://127.0.0.1:9000/mcp
    planfence policy init --from-upstream -- uvx mcp-server-git --repository .

Every template is checked when the policy loads, so a bad literal is reported here with its file
and line, not at the first call. With an upstream, the report lists the tools the policy does not
cover (their calls would be blocked as `undeclared_tool`) and the entries that name no upstream
tool (usually a typo).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from planfence.plugins.gate import Policy
from planfence.plugins.gate.audit import AUDIT_SOURCE
from planfence.plugins.gate.decision_log import find_decisions_sync
from planfence.plugins.gate.scope_lint import AllowedCall, lint_scopes
from planfence.shared_memory import ConfigError
from planfence.shared_memory.extras import extra_imports

from .common import (
    UsageError,
    add_json_flag,
    add_store_option,
    emit,
    guarded,
    open_cli_store,
    positive_int,
)

CHECK_FLAG, INIT_FLAG = "--tools-from-upstream", "--from-upstream"


def _add_upstream(p: argparse.ArgumentParser, flag: str, listed: str, url_help: str) -> None:
    """How a command names the upstream whose tools it lists: `flag` (the MCP server whose
    command follows --) or --upstream-url, and how long the listing may take."""
    p.add_argument(
        flag, action="store_true", help=f"start the MCP server given after -- and {listed}"
    )
    p.add_argument("--upstream-url", default=None, metavar="URL", help=url_help)
    p.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="give up on the upstream after this long",
    )


def _add_upstream_command(p: argparse.ArgumentParser, flag: str) -> None:
    p.add_argument(
        "upstream",
        nargs=argparse.REMAINDER,
        metavar="-- CMD [ARGS...]",
        help=f"the upstream server's command line (with {flag})",
    )


def _add_options(p: argparse.ArgumentParser) -> None:
    _add_upstream(
        p,
        CHECK_FLAG,
        "compare its tools with the policy",
        "compare with a streamable-HTTP server",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of text")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    pol = sub.add_parser("policy", help="validate tool policies")
    psub = pol.add_subparsers(dest="policy_cmd", required=True, metavar="COMMAND")
    p = psub.add_parser(
        "check",
        help="validate a policy file; with an upstream, list uncovered tools and stray entries",
        usage="planfence policy check FILE [--json] "
        "[--tools-from-upstream -- CMD [ARGS...] | --upstream-url URL]",
    )
    p.add_argument("file", metavar="FILE", help="the TOML policy")
    _add_options(p)
    _add_upstream_command(p, CHECK_FLAG)
    p.set_defaults(handler=guarded(_check))

    init = psub.add_parser(
        "init",
        help="write a first policy from an upstream's tools: one commented entry per tool",
        description=(
            "List the upstream's tools and write a commented policy: ungated = true suggested "
            "for tools the server annotates readOnlyHint, a depends_on suggestion from the input "
            "schema for the others ({arg:path} for paths, {arg:enc} for other text). Every "
            "suggestion is marked CONFIRM for you to check. An existing file is kept unless "
            "--force is given."
        ),
        usage="planfence policy init [--file FILE] [--force] [--json] "
        "(--from-upstream -- CMD [ARGS...] | --upstream-url URL)",
    )
    _add_upstream(init, INIT_FLAG, "list its tools", "list a streamable-HTTP server's tools")
    init.add_argument(
        "--file",
        default="policy.toml",
        metavar="FILE",
        help="where to write the policy (default: policy.toml; '-': standard output)",
    )
    init.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    init.add_argument("--json", action="store_true", help="print a JSON summary instead of text")
    _add_upstream_command(init, INIT_FLAG)
    init.set_defaults(handler=guarded(_init))

    lint = psub.add_parser(
        "lint",
        help="find keys whose values reached a tool's arguments without being in its depends_on",
        description=(
            "Read the audit's allowed calls and their plans' lineage; report each key (as a "
            "template when one fits) whose record values equal an argument of a tool that does "
            "not depend on it. Exit 1 when there is any."
        ),
    )
    lint.add_argument("file", metavar="FILE", help="the TOML policy")
    add_store_option(lint)
    lint.add_argument(
        "--limit",
        type=positive_int,
        default=10_000,
        metavar="N",
        help="read at most the N newest allowed calls",
    )
    add_json_flag(lint)
    lint.set_defaults(handler=guarded(_lint))


def _split_rest(args: argparse.Namespace) -> list[str]:
    """Options given after FILE land in the remainder with the command: parse them here."""
    rest = list(args.upstream or [])
    cut = rest.index("--") if "--" in rest else len(rest)
    options, command = rest[:cut], rest[cut + 1 :]
    if options:
        late = argparse.ArgumentParser(prog="planfence policy check", add_help=False)
        _add_options(late)
        try:
            parsed = late.parse_args(options)
        except SystemExit:
            raise UsageError(f"cannot read the options {' '.join(options)!r}") from None
        for name, value in vars(parsed).items():
            if value != late.get_default(name):
                setattr(args, name, value)
    return command


def _upstream_target(args: argparse.Namespace, command: list[str], flag: str) -> Any:
    """The upstream the command line names: the server command after -- (with `flag`), or
    --upstream-url; None when it names neither."""
    started = getattr(args, flag.removeprefix("--").replace("-", "_"))
    if command and not started:
        raise UsageError(f"unexpected arguments {' '.join(command)!r}: add {flag}")
    if started and not command:
        raise UsageError(f"{flag} needs the server's command after --")
    if command and args.upstream_url:
        raise UsageError(f"give either {flag} -- CMD [ARGS...] or --upstream-url URL, not both")
    if not command:
        return args.upstream_url or None
    with extra_imports("mcp", _hint(args, flag)):
        from planfence.adapters.mcp.upstream import stdio_upstream
    return stdio_upstream(command)


def _hint(args: argparse.Namespace, flag: str) -> str:
    """What needs the `mcp` extra, for its install hint."""
    return f"policy {args.policy_cmd} {flag}"


def _listing(
    target: Any, timeout: float, hint: str
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The upstream's identity and tools, in wire form."""
    with extra_imports("mcp", hint):
        import anyio

        from planfence.adapters.mcp.listing import list_tools

    async def listing() -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        with anyio.fail_after(timeout):
            info, tools = await list_tools(target)
        server = info.model_dump(by_alias=True, exclude_none=True) if info is not None else None
        wire = [t.model_dump(by_alias=True, mode="json", exclude_none=True) for t in tools]
        return server, wire

    try:
        return anyio.run(listing)
    except TimeoutError:
        raise ConfigError(f"the upstream listed no tools within {timeout:g} s") from None
    except Exception as exc:
        raise ConfigError(
            f"cannot list the upstream's tools: {exc or type(exc).__name__}"
        ) from None


def _write_new(path: Path, text: str, force: bool) -> None:
    """Write `text` to `path` in one step (a partial file is never left behind)."""
    folder = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        if force:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)  # fails if the file appeared meanwhile: never overwritten
    except FileExistsError:
        raise ConfigError(f"{path} exists: give --force to overwrite it") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _init(args: argparse.Namespace) -> int:
    command = list(args.upstream or [])
    if command and command[0] == "--":
        command = command[1:]
    target = _upstream_target(args, command, INIT_FLAG)
    if target is None:
        raise UsageError(f"give either {INIT_FLAG} -- CMD [ARGS...] or --upstream-url URL")
    to_stdout = args.file == "-"
    path = Path(args.file)
    if not to_stdout:
        if path.exists() and not args.force:
            raise ConfigError(f"{path} exists: give --force to overwrite it")
        if not path.parent.is_dir():
            raise ConfigError(f"cannot write {path}: no folder {path.parent}")
    with extra_imports("mcp", _hint(args, INIT_FLAG)):
        from planfence.adapters.mcp.scaffold import scaffold_policy
    server, tools = _listing(target, args.timeout, _hint(args, INIT_FLAG))
    try:
        text = scaffold_policy(server, tools)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    policy = Policy.from_toml(text, source=args.file)
    ungated = sorted(n for n, t in policy.tools.items() if t.ungated)
    gated = {n: [d.text for d in t.depends_on] for n, t in policy.tools.items() if not t.ungated}
    if to_stdout:
        sys.stdout.write(text)
        return 0
    _write_new(path, text, args.force)
    data = {"file": str(path), "tools": len(policy.tools), "ungated": ungated, "gated": gated}
    emit(
        args,
        data,
        f"wrote {path}: {len(policy.tools)} tools, {len(ungated)} suggested ungated (readOnlyHint) "
        f"and {len(gated)} with depends_on; check every line marked CONFIRM",
    )
    return 0


def _check(args: argparse.Namespace) -> int:
    command = _split_rest(args)
    problems = Policy.lint(args.file)  # a broken policy fails before any upstream starts
    if problems:
        for problem in problems[:-1]:  # every problem, in file order; the last ends the command
            print(f"planfence: error: {problem}", file=sys.stderr)
        raise problems[-1]
    policy = Policy.load(args.file)
    tools = policy.tools
    gated = sorted(n for n, t in tools.items() if not t.ungated)
    ungated = sorted(n for n, t in tools.items() if t.ungated)
    data: dict[str, Any] = {
        "file": args.file,
        "valid": True,
        "gated": {n: [t.text for t in tools[n].depends_on] for n in gated},
        "ungated": ungated,
    }
    lines = [f"{args.file}: valid, {len(gated)} gated and {len(ungated)} ungated tools"]
    for n in gated:
        lines.append(f"  {n}: depends on {', '.join(t.text for t in tools[n].depends_on)}")
    for n in ungated:
        lines.append(f"  {n}: ungated")
    code = 0
    target = _upstream_target(args, command, CHECK_FLAG)
    if target is not None:
        _, tools_listed = _listing(target, args.timeout, _hint(args, CHECK_FLAG))
        upstream = [t["name"] for t in tools_listed]
        uncovered = policy.uncovered_tools(upstream)
        stray = policy.unused_tools(upstream)
        data.update(upstream_tools=upstream, uncovered=uncovered, stray=stray)
        lines.append(f"upstream lists {len(upstream)} tools")
        if uncovered:
            lines.append(
                "not covered (every call blocked as undeclared_tool): " + ", ".join(uncovered)
            )
        if stray:
            lines.append("policy entries that name no upstream tool: " + ", ".join(stray))
        if not uncovered and not stray:
            lines.append("every upstream tool is declared, and every entry names one")
        code = 1 if uncovered or stray else 0
    emit(args, data, "\n".join(lines))
    return code


def _lint(args: argparse.Namespace) -> int:
    policy = Policy.load(args.file)
    with open_cli_store(args) as store:
        allows = find_decisions_sync(store, source=AUDIT_SOURCE, verdict="allow", limit=args.limit)
        calls = [c for c in map(AllowedCall.from_audit, allows) if c is not None]
        flows = lint_scopes(policy, calls, lambda plan: store.lineage(plan))
    data = {"file": args.file, "calls": len(calls), "flows": [f.to_dict() for f in flows]}
    lines = [f"read {len(calls)} allowed call(s)"]
    for f in flows:
        ex = f.example
        lines.append(
            f"{f.tool}: {f.key} fed {', '.join(sorted(f.arguments))} in {f.calls} call(s) but is "
            f"not in its depends_on; e.g. plan {ex['plan'][:12]} used {ex['record_key']} "
            f"({ex['record'][:12]}) as {ex['argument']}"
        )
    if not flows:
        lines.append("every argument value read from a record came from a declared key")
    emit(args, data, "\n".join(lines))
    return 1 if flows else 0
