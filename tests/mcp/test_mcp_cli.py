"""`planfence proxy` and `planfence bench proxy` from the command line, and the pieces of the
proxy that need no server: the wire shape of refusals and which `_meta` keys travel upstream."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mcp_helpers import POLICY, World, free_port

from planfence.adapters.mcp.meta import forwardable_meta
from planfence.adapters.mcp.results import ProxyFailure, to_wire_result
from planfence.plugins.gate import Verdict
from planfence.plugins.gate.decision import StaleKey


def planfence(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "planfence.adapters.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def test_refusal_wire_shape() -> None:
    verdict = Verdict(
        "replan",
        "stale_dependencies",
        "book",
        "p1",
        message="replan once",
        stale=(StaleKey("trip/1", ("a",), "b"),),
        decision_id=3,
    )
    wire = to_wire_result(verdict)
    assert wire["isError"] is True
    assert wire["structuredContent"] == {
        "planfence": {
            "verdict": "replan",
            "reason": "stale_dependencies",
            "tool": "book",
            "plan": "p1",
            "stale": [{"key": "trip/1", "used": ["a"], "current": "b"}],
            "message": "replan once",
            "decision_id": 3,
        }
    }
    assert json.loads(wire["content"][0]["text"]) == wire["structuredContent"]

    failed = to_wire_result(ProxyFailure("upstream_timeout", "book", "slow", {"verdict": "allow"}))
    assert failed["structuredContent"]["planfence"]["error"] == "upstream_timeout"
    assert failed["isError"] is True


def test_only_connection_envelope_keys_stay_behind() -> None:
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "x"},
        "progressToken": 4,
        "dev.planfence/plan": "p",
        "dev.planfence/agent": "a",
        "acme.dev/trace": "t",
    }
    assert forwardable_meta(meta) == {
        "dev.planfence/plan": "p",
        "dev.planfence/agent": "a",
        "acme.dev/trace": "t",
    }
    assert forwardable_meta(None) is None
    assert forwardable_meta({"progressToken": 1}) is None


def test_proxy_needs_an_upstream(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    done = planfence("proxy", "--policy", str(policy))
    assert done.returncode != 0
    assert "UPSTREAM_COMMAND" in done.stderr


def test_an_upstream_that_cannot_be_reached_is_named(world: World) -> None:
    """The one error line says which upstream: the URL (password hidden), or the command, and
    for a command not found, that the PATH is the one the proxy was started with."""
    proxy = ["proxy", "--policy", str(world.policy), "--store", world.store_url]
    url = f"http://agent:s3cret@127.0.0.1:{free_port()}/mcp"
    done = planfence(*proxy, "--upstream-url", url)
    assert done.returncode == 1
    assert done.stderr == (
        f"planfence: error: cannot connect to the upstream server at "
        f"{url.replace('s3cret', '***')}: All connection attempts failed\n"
    )
    done = planfence(*proxy, "--", "mcp-server-not-installed", "--repository", ".")
    assert done.returncode == 1
    assert done.stderr.startswith(
        "planfence: error: cannot start the upstream server: 'mcp-server-not-installed' is not "
        "on the PATH the proxy was started with"
    )
    assert "absolute path" in done.stderr and done.stderr.count("\n") == 1


def test_bad_policy_names_file_and_line(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('[tools.book]\ndepends_on = ["trip/{trip}"]\n\n[tools.ship]\nungated = 3\n')
    done = planfence("proxy", "--policy", str(policy), "--", sys.executable, "-c", "pass")
    assert done.returncode != 0
    assert f"{policy}:5" in done.stderr  # the line of `ungated = 3`
    assert "ungated" in done.stderr


def test_missing_mcp_extra_names_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    from planfence.adapters.mcp import cli
    from planfence.shared_memory import MissingExtraError

    for name in list(sys.modules):
        if name.startswith("planfence.adapters.mcp.serve"):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "mcp", None)
    monkeypatch.setitem(sys.modules, "mcp.server", None)
    monkeypatch.setitem(sys.modules, "mcp.server.stdio", None)
    parser = __import__("argparse").ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    args = parser.parse_args(["proxy", "--policy", "p.toml", "--", "server"])
    with pytest.raises(MissingExtraError, match=r"pip install 'planfence\[mcp\]'"):
        cli.run(args)


@pytest.mark.parametrize("module", ["proxy", "relay", "serve", "in_server"])
def test_importing_the_proxy_without_mcp_names_the_extra(module: str) -> None:
    code = (
        "import sys\n"
        "sys.modules['mcp'] = None\n"  # what an environment without the extra looks like
        "from planfence.shared_memory import MissingExtraError\n"
        "try:\n"
        f"    import planfence.adapters.mcp.{module}\n"
        "except MissingExtraError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "pip install 'planfence[mcp]'" in done.stdout


def test_importing_the_fastmcp_gate_without_fastmcp_names_the_extra() -> None:
    code = (
        "import sys\n"
        "sys.modules['fastmcp'] = None\n"
        "from planfence.shared_memory import MissingExtraError\n"
        "try:\n"
        "    import planfence.adapters.mcp.fastmcp_gate\n"
        "except MissingExtraError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "pip install 'planfence[fastmcp]'" in done.stdout
