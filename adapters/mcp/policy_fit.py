"""How well the policy fits the upstream it guards, told once at proxy start.

The policy is written by hand for a server written by someone else, so the usual mistakes are
names: a template reading an argument the tool does not take (every call then blocks as
`scope_unresolved`), a declared tool the upstream does not have (a typo, or a removed tool), an
upstream tool the policy does not declare (every call blocks as `undeclared_tool`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from planfence.plugins.gate import Policy

from .catalog import ToolCatalog

logger = logging.getLogger("planfence.mcp")


def policy_warnings(policy: Policy, tools: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Every mismatch between `policy` and the upstream's `tools` (name -> tool description)."""
    out: list[str] = []
    uncovered = policy.uncovered_tools(tools)
    if uncovered:
        out.append(
            f"the policy declares nothing for {', '.join(uncovered)}: every call to them will be "
            "blocked (undeclared_tool); declare depends_on or ungated = true"
        )
    for name in policy.unused_tools(tools):
        out.append(f"{policy.source}: [tools.{name}] names a tool the upstream does not have")
    for name, tool in tools.items():
        declared = policy.get(name)
        if declared is None or declared.ungated:
            continue
        schema = tool.get("inputSchema")
        properties = schema.get("properties") if isinstance(schema, Mapping) else None
        if not isinstance(properties, Mapping):
            continue
        for template in declared.depends_on:
            for param in template.parameters:
                if param not in properties:
                    out.append(
                        f"{policy.source}: [tools.{name}] template {template.text!r} reads "
                        f"argument {param!r}, which the tool's input schema does not have "
                        "(every call will be blocked as scope_unresolved)"
                    )
    return out


async def warn_about_policy(policy: Policy, catalog: ToolCatalog) -> None:
    """List the upstream's tools (filling the catalog) and log how the policy fits them."""
    if not await catalog.refresh():
        logger.warning("could not list the upstream's tools to check the policy against them")
        return
    for warning in policy_warnings(policy, catalog.tools):
        logger.warning("%s", warning)


__all__ = ["policy_warnings", "warn_about_policy"]
