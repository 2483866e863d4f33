"""`planfence check`: a dry run of the gate for one call.

    planfence check ship_order --args '{"order_id": "o1"}' --policy policy.toml --plan 3f2a9c1e

Prints the keys the call depends on (each template of the tool's policy, filled from the
arguments with its convertors), the versions the plan used of each, their current heads, and
the verdict the gate would give now, with its reason and message. The verdict comes from the
gate itself (`Gate.preview`: the same flow and reads as a real check). Nothing is written: no
audit entry, so no replan budget is spent either. Without `--plan` it still prints the keys and
their heads.

The exit status is the verdict, so a script can act on it: 0 allow, 3 replan, 4 block (a call
without `--plan` is one the gate blocks: `missing_plan`); 1 when the check could not be made (no
store, say), 2 for a usage error, as every command.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Mapping
from typing import Any

from planfence.plugins.gate import Gate, Policy, ScopeError, ToolCall, Verdict
from planfence.plugins.gate.rule import CHECK_HINT
from planfence.plugins.gate.wire import payload_of
from planfence.shared_memory import KeyState, open_async_store
from planfence.shared_memory.records import validate_agent

from .common import UsageError, add_output, add_store_option, emit, guarded, store_url, write_out

EXIT_ALLOW, EXIT_REPLAN, EXIT_BLOCK = 0, 3, 4
EXIT_OF_VERDICT = {"allow": EXIT_ALLOW, "replan": EXIT_REPLAN, "block": EXIT_BLOCK}


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "check",
        help="dry run: the keys a call depends on, their versions, and the gate's verdict",
        description="Show what the gate would decide for one call, writing nothing: the keys "
        "the call depends on, the versions the plan used of each, their current heads, and the "
        "verdict with its reason. Without --plan: the keys and their heads. Exit status: "
        f"{EXIT_ALLOW} allow, {EXIT_REPLAN} replan, {EXIT_BLOCK} block; 1 when the check could "
        "not be made, 2 for a usage error.",
    )
    p.add_argument("tool", metavar="TOOL", help="the tool's name, as the policy declares it")
    p.add_argument(
        "--args",
        dest="call_args",
        default="{}",
        metavar="JSON",
        help="the call's arguments, a JSON object (default: {})",
    )
    p.add_argument("--policy", required=True, metavar="FILE", help="TOML policy (tool scopes)")
    p.add_argument(
        "--plan",
        default=None,
        metavar="PLAN_ID",
        help="the plan the call cites (a full id or a unique prefix of 8+ hex digits)",
    )
    p.add_argument("--agent", default=None, metavar="NAME", help="the agent making the call")
    add_store_option(p)
    add_output(p)
    p.set_defaults(handler=guarded(_check))


def _call_args(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--args is not valid JSON: {exc.msg} at column {exc.colno}") from None
    if not isinstance(value, dict):
        raise UsageError(f"--args must be a JSON object, got {type(value).__name__}")
    return value


def _check(args: argparse.Namespace) -> int:
    call_args = _call_args(args.call_args)
    if args.agent is not None:
        validate_agent(args.agent)
    policy = Policy.load(args.policy)
    report = asyncio.run(_report(args, policy, call_args))
    write_out(args, report)
    emit(args, report, _text(report))
    return EXIT_OF_VERDICT[report["verdict"]["verdict"]]


async def _report(
    args: argparse.Namespace, policy: Policy, call_args: dict[str, Any]
) -> dict[str, Any]:
    store = await open_async_store(store_url(args), create=False)
    try:
        plan_id = await store.resolve_id(args.plan) if args.plan is not None else None
        # audit=False and `preview`: the gate's own decision, with no journal entry written.
        gate = Gate(store, policy, audit=False, agent=args.agent)
        verdict = await gate.preview(ToolCall(args.tool, call_args, plan_id))
        templates = _templates(policy, args.tool, call_args)
        # D(a); when some template does not fill, the keys of those that do.
        keys = verdict.scope or tuple(sorted({t["key"] for t in templates if t["key"]}))
        states = await store.states(keys) if keys else {}
    finally:
        await store.aclose()
    return _document(args.tool, policy, call_args, verdict, templates, keys, states)


def _templates(policy: Policy, tool: str, call_args: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each template of the tool, with the key it fills to, or why it does not."""
    declared = policy.get(tool)
    if declared is None:
        return []
    out: list[dict[str, Any]] = []
    for template in declared.depends_on:
        try:
            out.append({"template": template.text, "key": template.fill(call_args)})
        except ScopeError as exc:
            out.append({"template": template.text, "key": None, "error": str(exc)})
    return out


def _document(
    tool: str,
    policy: Policy,
    call_args: Mapping[str, Any],
    verdict: Verdict,
    templates: list[dict[str, Any]],
    scope: tuple[str, ...],
    states: Mapping[str, KeyState],
) -> dict[str, Any]:
    declared = policy.get(tool)
    keys = []
    for key in scope:
        state = states.get(key)
        # The heads the gate judged, where it got that far; else the store's, read just after.
        head = verdict.heads.get(key, state.head if state else None)
        used = list(verdict.frontier[key]) if key in verdict.frontier else None
        keys.append(
            {
                "key": key,
                "owner": state.owner if state else None,
                "epoch": state.epoch if state else None,
                "head": head,
                "used": used,
                "current": None if used is None else used == [head],
            }
        )
    return {
        "tool": tool,
        "declared": declared is not None,
        "ungated": bool(declared and declared.ungated),
        "args": dict(call_args),
        "plan": verdict.plan,
        "agent": verdict.agent,
        "templates": templates,
        "keys": keys,
        # What the gate would say, in the same wire model every adapter sends.
        "verdict": payload_of(verdict).wire(),
        "written": False,
    }


def _text(report: Mapping[str, Any]) -> str:
    lines = [f"tool {report['tool']}" + ("" if report["declared"] else " (not in the policy)")]
    if report["ungated"]:
        lines.append("  declared ungated: depends on no keys")
    if report["templates"]:
        lines.append("keys the call depends on:")
        width = max(len(t["template"]) for t in report["templates"])
        for t in report["templates"]:
            filled = t["key"] if t["key"] is not None else f"(unresolved: {t['error']})"
            lines.append(f"  {t['template']:<{width}}  ->  {filled}")
    if report["keys"]:
        with_plan = report["plan"] is not None
        lines.append("versions:" if with_plan else "heads (no --plan given):")
        for k in report["keys"]:
            owner = f"owner {k['owner']} epoch {k['epoch']}" if k["owner"] else "no owner"
            lines.append(f"  {k['key']}  ({owner})")
            if with_plan:
                used = ", ".join(k["used"]) if k["used"] else "(none)"
                if k["used"] is None:
                    used = "(not known: the check stopped before the lineage walk)"
                lines.append(f"    plan used  {used}")
            mark = {True: "  (current)", False: "  (changed)", None: ""}[k["current"]]
            lines.append(f"    head       {k['head'] or '(none)'}{mark}")
    v = report["verdict"]
    plan = f" for plan {report['plan']}" if report["plan"] else ""
    lines.append(f"verdict{plan}: {v['verdict']} ({v['reason']})")
    if v.get("message"):
        # This is the dry run the refusal points to: no need to say to run it.
        lines.append(f"  {v['message'].replace(f' ({CHECK_HINT})', '')}")
    lines.append("dry run: nothing was written (no audit entry, no replan budget spent)")
    return "\n".join(lines)
