"""Fixtures for the owner-service tests: a keyring and owner processes (see owner_helpers)."""

from __future__ import annotations

import json
import os
import secrets
import sys
from collections.abc import Iterator

import pytest
from owner_helpers import AGENTS, HERE, Owners, Server, free_port, seed_team, start_server

from planfence.adapters.owner_service import Keyring
from planfence.adapters.owner_service.keyring import KEYRING_ENV


@pytest.fixture(scope="session")
def secrets_by_agent() -> dict[str, str]:
    return {agent: secrets.token_hex(24) for agent in AGENTS}


@pytest.fixture
def keyring(secrets_by_agent: dict[str, str]) -> Keyring:
    return Keyring(secrets_by_agent, source="<test keyring>")


@pytest.fixture(scope="module")
def owners(
    tmp_path_factory: pytest.TempPathFactory, secrets_by_agent: dict[str, str]
) -> Iterator[Owners]:
    """`planner` and `reviser` served by `planfence serve-owner` processes over one SQLite file,
    and a fault-injecting reviser in a third process."""
    tmp = tmp_path_factory.mktemp("owners")
    team = seed_team(f"sqlite:///{tmp / 'team.db'}")
    env = {**os.environ, KEYRING_ENV: json.dumps(secrets_by_agent)}
    servers: list[Server] = []
    try:
        for agent in ("planner", "reviser"):
            port = free_port()
            cmd = [sys.executable, "-m", "planfence.adapters.cli", "serve-owner"]
            cmd += ["--agent", agent, "--store", team.url, "--port", str(port)]
            servers.append(start_server(cmd, env, tmp / f"{agent}.log", port))
        port = free_port()
        cmd = [sys.executable, str(HERE / "fault_owner.py"), "--agent", "reviser"]
        cmd += ["--store", team.url, "--port", str(port), "--impostor", "intruder"]
        fault = start_server(cmd, env, tmp / "fault.log", port)
        servers.append(fault)
        yield Owners(
            team,
            {"planner": servers[0].base_url, "reviser": servers[1].base_url},
            fault.base_url,
            f"http://127.0.0.1:{free_port()}",
        )
    finally:
        for server in servers:
            server.stop()
