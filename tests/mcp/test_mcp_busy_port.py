"""A busy port: `planfence proxy --transport http` and `planfence ui` say so in one
`planfence: error:` line and exit 1, without announcing a URL they never bound; bound, they
announce the URL only once it accepts connections (the UI's with its store's URL)."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp_helpers import World

from planfence.shared_memory import open_store


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


def planfence(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "planfence.adapters.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def assert_one_error_line(done: subprocess.CompletedProcess[str], port: int) -> None:
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("planfence: error: cannot listen on 127.0.0.1:")
    assert str(port) in lines[0] and "already in use" in lines[0]
    assert "http://" not in done.stderr and "Errno" not in done.stderr


def test_the_http_proxy_on_a_busy_port(world: World, busy_port: int) -> None:
    argv = world.proxy_args("--transport", "http", "--port", str(busy_port))
    done = planfence(*argv[2:], "--", *world.upstream_command())
    assert_one_error_line(done, busy_port)


def test_the_ui_on_a_busy_port(tmp_path: Path, busy_port: int) -> None:
    url = f"sqlite:///{tmp_path / 'ui.db'}"
    open_store(url).close()
    done = planfence("ui", "--store", url, "--port", str(busy_port))
    assert_one_error_line(done, busy_port)


def test_the_ui_announces_its_store_url_once_listening(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ui.db'}"
    open_store(url).close()
    with subprocess.Popen(
        [sys.executable, "-m", "planfence.adapters.cli", "ui", "--store", url, "--port", "0"],
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    ) as proc:
        try:
            assert proc.stderr is not None
            line = proc.stderr.readline().strip()
            assert line.startswith(f"planfence ui: {url} at http://127.0.0.1:"), line
            port = int(line.rsplit(":", 1)[1])
            socket.create_connection(("127.0.0.1", port), timeout=5).close()  # it listens
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def test_the_http_proxy_announces_the_port_it_listens_on(world: World) -> None:
    argv = world.proxy_args("--transport", "http", "--port", "0")
    with subprocess.Popen(
        [sys.executable, *argv, "--", *world.upstream_command()],
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    ) as proc:
        try:
            assert proc.stderr is not None
            for line in proc.stderr:  # policy warnings come first
                if "serving MCP" in line:
                    break
            prefix = "planfence proxy: serving MCP over streamable HTTP at http://127.0.0.1:"
            assert line.startswith(prefix) and line.rstrip().endswith("/mcp"), line
            port = int(line[len(prefix) :].split("/", 1)[0])
            assert port != 0
            socket.create_connection(("127.0.0.1", port), timeout=5).close()  # it listens
        finally:
            proc.terminate()
            proc.wait(timeout=30)
