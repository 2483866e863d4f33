"""HTTP services the benchmarks run in their own processes (owner services, replica endpoints).

The parent binds each listening socket itself, on port 0, reads the port the kernel gave it,
and hands the open socket to the child process, which serves on it (uvicorn with a pre-bound
socket). No port is ever picked first and bound later, so two services (or two benchmarks, or
anything else on the machine) cannot race for one port.

Each child runs in its own session: a Ctrl-C at the terminal reaches the benchmark only, which
then stops its children itself, after it has reported what it measured. A benchmark that is
killed cannot stop them: each child watches its parent (`lifeline`) and stops once it is gone.

Run as a module, this file is the child: `python -m planfence.demos.bench.harness.services --fd N
[--parent-fd P] [--keep-alive S] module:factory`.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from planfence.shared_memory.extras import extra_imports

from .lifeline import die_with_parent, lifeline

with extra_imports("bench", "a benchmark's HTTP service"):
    from starlette.applications import Starlette

OWNER_ENV = "PLANFENCE_BENCH_OWNER"
STORE_URL_ENV = "PLANFENCE_BENCH_STORE"
SIGNING_KEY_ENV = "PLANFENCE_BENCH_SIGNING_KEY"
READY_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Service:
    """One service: the app factory (`module:function`, called with no arguments in the child)
    and the environment the factory reads."""

    factory: str
    env: Mapping[str, str] = field(default_factory=dict)
    keep_alive_s: float = 5.0


def owner_app() -> Starlette:
    """Factory: the owner service `planfence serve-owner` runs, for the agent in
    $PLANFENCE_BENCH_OWNER over the store at $PLANFENCE_BENCH_STORE (keyring from
    $PLANFENCE_KEYRING; with a public keyring, the owner's private key file from
    $PLANFENCE_BENCH_SIGNING_KEY)."""
    from planfence.adapters.owner_service import SigningKey, load_keyring
    from planfence.adapters.owner_service.server import create_app

    key_file = os.environ.get(SIGNING_KEY_ENV)
    signing_key = SigningKey.load(key_file) if key_file else None
    return create_app(
        os.environ[OWNER_ENV], os.environ[STORE_URL_ENV], load_keyring(), signing_key=signing_key
    )


def owner_service(
    owner: str,
    store_url: str,
    keyring: Mapping[str, Any],
    *,
    signing_key: Path | None = None,
    **kw: float,
) -> Service:
    """`keyring`: shared secrets (agent -> secret, deprecated) or a public JWK Set
    (`{"keys": [...]}`, with `signing_key` the owner's private key file)."""
    from planfence.adapters.owner_service.keyring import KEYRING_ENV

    env = {OWNER_ENV: owner, STORE_URL_ENV: store_url, KEYRING_ENV: json.dumps(dict(keyring))}
    if signing_key is not None:
        env[SIGNING_KEY_ENV] = str(signing_key)
    return Service(f"{__name__}:owner_app", env, **kw)


def port_of(url: str) -> int:
    """The port of a service's base URL (`http://127.0.0.1:PORT`)."""
    return int(url.rsplit(":", 1)[1])


def listening_socket(host: str = "127.0.0.1") -> socket.socket:
    """A TCP socket bound to a port the kernel picks, already listening, inheritable."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((host, 0))
        sock.listen(128)
        sock.set_inheritable(True)
    except OSError:
        sock.close()
        raise
    return sock


@contextmanager
def running(services: Mapping[str, Service], logs: Path) -> Iterator[dict[str, str]]:
    """Start one process per service; yield name -> base URL once all answer /health; stop
    them all on the way out (also on Ctrl-C or an error)."""
    procs: dict[str, subprocess.Popen[bytes]] = {}
    urls: dict[str, str] = {}
    try:
        for name, service in services.items():
            sock = listening_socket()
            try:
                port = sock.getsockname()[1]
                parent = lifeline()
                cmd = [sys.executable, "-m", __name__, "--fd", str(sock.fileno())]
                cmd += ["--parent-fd", str(parent)]
                cmd += ["--keep-alive", str(service.keep_alive_s), service.factory]
                with (logs / f"{name}.log").open("wb") as log:
                    procs[name] = subprocess.Popen(
                        cmd,
                        env={**os.environ, **service.env},
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        pass_fds=(sock.fileno(), parent),
                        start_new_session=True,
                    )
            finally:
                sock.close()  # the child holds its own copy
            urls[name] = f"http://127.0.0.1:{port}"
        for name, proc in procs.items():
            wait_ready(proc, urls[name], logs / f"{name}.log")
        yield urls
    finally:
        stop(procs.values())


def stop(procs: Iterable[subprocess.Popen[bytes]]) -> None:
    procs = list(procs)  # stop them all, then wait for each
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_ready(proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    with httpx.Client(timeout=1.0) as client:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"service at {url} exited: {log.read_text(errors='replace')}")
            try:
                if client.get(f"{url}/health").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"service at {url} did not start")
            time.sleep(0.05)


def main(argv: Sequence[str] | None = None) -> None:
    with extra_imports("bench", "a benchmark's HTTP service"):
        import uvicorn

    parser = argparse.ArgumentParser(prog="planfence-bench-service")
    parser.add_argument("--fd", type=int, required=True, help="listening socket to serve on")
    parser.add_argument(
        "--parent-fd", type=int, default=None, help="the parent's lifeline: stop at its end"
    )
    parser.add_argument("--keep-alive", type=float, default=5.0, help="idle connection timeout")
    parser.add_argument("factory", help="module:function returning the ASGI app")
    args = parser.parse_args(argv)
    if args.parent_fd is not None:
        die_with_parent(args.parent_fd)
    sock = socket.socket(fileno=args.fd)
    config = uvicorn.Config(
        args.factory,
        factory=True,
        log_level="warning",
        access_log=False,
        timeout_keep_alive=int(args.keep_alive),
    )
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
