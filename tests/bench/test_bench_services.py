"""The benchmarks' HTTP services listen on a socket the benchmark bound itself before the service
process started, so no other program can take the port in between (the race behind "address
already in use"); and progress shows as plain lines without a terminal, as a bar on one."""

from __future__ import annotations

import io
import os
import socket
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from planfence.demos.bench.harness import services
from planfence.demos.support import Progress

HEALTH_APP = f"{__name__}:health_app"


def health_app() -> Any:
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def health(request: Any) -> JSONResponse:
        return JSONResponse({"ok": True})

    return Starlette(routes=[Route("/health", health)])


def test_the_port_is_held_before_the_service_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another program tries to take each service's port just before the service process
    starts: it cannot, and every service comes up on the port it was given."""
    squatters: list[socket.socket] = []
    refused: list[int] = []
    real_popen = subprocess.Popen

    def popen(cmd: list[str], **kw: Any) -> subprocess.Popen[bytes]:
        fd = int(cmd[cmd.index("--fd") + 1])
        with socket.socket(fileno=os.dup(fd)) as held:
            port = held.getsockname()[1]
        other = socket.socket()
        squatters.append(other)
        try:
            other.bind(("127.0.0.1", port))
        except OSError:
            refused.append(port)
        return real_popen(cmd, **kw)

    monkeypatch.setattr(services.subprocess, "Popen", popen)
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))
    specs = {f"s{i}": services.Service(HEALTH_APP) for i in range(3)}
    try:
        with services.running(specs, tmp_path) as urls:
            ports = [int(url.rsplit(":", 1)[1]) for url in urls.values()]
            assert sorted(refused) == sorted(ports) and len(set(ports)) == 3
            for url in urls.values():
                assert httpx.get(f"{url}/health").json() == {"ok": True}
    finally:
        for other in squatters:
            other.close()


def test_services_stop_when_the_block_ends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))
    with services.running({"one": services.Service(HEALTH_APP)}, tmp_path) as urls:
        url = urls["one"]
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/health", timeout=2)


def test_no_benchmark_picks_a_port_to_bind_it_later() -> None:
    bench = Path(services.__file__).parent.parent
    for source in bench.rglob("*.py"):
        text = source.read_text()
        assert "_free_port" not in text, source.name
        assert '"--port"' not in text, f"{source.name} passes a port number to a process"


def test_progress_without_a_terminal_prints_plain_lines() -> None:
    stream = io.StringIO()
    with Progress("bench x", 3, stream=stream) as progress:
        for step in ("a", "b", "c"):
            progress.advance(step)
    assert stream.getvalue().splitlines() == ["bench x: 1/3 a", "bench x: 2/3 b", "bench x: 3/3 c"]


def test_progress_lines_stay_few_on_long_runs() -> None:
    stream = io.StringIO()
    with Progress("bench x", 1000, stream=stream) as progress:
        for i in range(1000):
            progress.advance(f"step {i}")
    lines = stream.getvalue().splitlines()
    assert 20 <= len(lines) <= 41 and lines[-1] == "bench x: 1000/1000 step 999"


def test_progress_on_a_terminal_draws_a_bar() -> None:
    stream = io.StringIO()
    with Progress("bench x", 2, stream=stream, bar=True) as progress:
        progress.advance("first")
        progress.advance("second")
    drawn = stream.getvalue()
    assert "bench x: second" in drawn and "2/2" in drawn
    assert "bench x: 1/2" not in drawn  # bars, not lines
