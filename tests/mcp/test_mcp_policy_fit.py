"""At proxy start the policy is checked against the upstream's tool list: template arguments the
tool does not take, declared tools the upstream lacks, upstream tools the policy lacks."""

from __future__ import annotations

import sys
from pathlib import Path

from mcp_helpers import POLICY, World, background, free_port, wait_for_port

from planfence.adapters.mcp.policy_fit import policy_warnings
from planfence.plugins.gate import Policy

TOOLS = {
    "book": {"name": "book", "inputSchema": {"properties": {"trip": {}, "destination": {}}}},
    "ship": {"name": "ship", "inputSchema": {"properties": {"order_id": {}}}},
    "echo": {"name": "echo", "inputSchema": {"properties": {"text": {}}}},
}


def test_warnings_name_the_entry_the_template_and_the_argument() -> None:
    policy = Policy.from_toml(
        """
[tools.book]
depends_on = ["trip/{trip}/requirements", "city/{destination.code}"]

[tools.ship]
depends_on = ["order/{order}", "files/{path:path}"]

[tools.shipp]
ungated = true
""",
        source="policy.toml",
    )
    warnings = policy_warnings(policy, TOOLS)
    assert warnings[0].startswith("the policy declares nothing for echo:")
    assert "policy.toml: [tools.shipp] names a tool the upstream does not have" in warnings
    assert [w for w in warnings if "input schema" in w] == [
        "policy.toml: [tools.ship] template 'order/{order}' reads argument 'order', which the "
        "tool's input schema does not have (every call will be blocked as scope_unresolved)",
        "policy.toml: [tools.ship] template 'files/{path:path}' reads argument 'path', which the "
        "tool's input schema does not have (every call will be blocked as scope_unresolved)",
    ]
    assert len(warnings) == 4  # book's templates read arguments it has


def test_a_policy_that_fits_gets_no_warning() -> None:
    policy = Policy.from_toml(
        '[tools.book]\ndepends_on = ["trip/{trip}"]\n[tools.ship]\ndepends_on = ["o/{order_id}"]\n'
        "[tools.echo]\nungated = true\n"
    )
    assert policy_warnings(policy, TOOLS) == []


async def test_the_proxy_warns_at_start(world: World, tmp_path: Path) -> None:
    world.policy.write_text(POLICY + '\n[tools.ship]\ndepends_on = ["order/{order}"]\n')
    port = free_port()
    args = world.proxy_args("--transport", "http", "--port", str(port))
    log = tmp_path / "proxy.log"
    async with background([sys.executable, *args, "--", *world.upstream_command()], log):
        await wait_for_port(port)  # the checks run before the proxy listens
        text = log.read_text()
    assert "[tools.ship] template 'order/{order}' reads argument 'order'" in text
    assert "[tools.ghost] names a tool the upstream does not have" in text
