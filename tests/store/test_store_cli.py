"""`planfence memory ...`: the walk-through works; bad inputs give one line and a non-zero exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from planfence.adapters.cli.main import main

KEY = "trip/42/requirements"


class CLI:
    def __init__(self, url: str, capsys: pytest.CaptureFixture[str]) -> None:
        self.url = url
        self.capsys = capsys

    def __call__(self, *argv: str) -> tuple[int, str, str]:
        cmd, *rest = argv
        code = main(["memory", cmd, *rest, "--store", self.url])
        out, err = self.capsys.readouterr()
        return code, out, err

    def json(self, *argv: str) -> object:
        code, out, err = self(*argv, "--json")
        assert code == 0, err
        return json.loads(out)

    def fails(self, *argv: str, match: str) -> str:
        code, out, err = self(*argv)
        assert code != 0
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert lines[0].startswith("planfence: error: ")
        assert match in lines[0], lines[0]
        assert "Traceback" not in err + out
        code, out, err = self(*argv, "--json")
        assert code != 0
        data = json.loads(out)
        assert set(data) == {"error", "message"}
        return lines[0]


@pytest.fixture
def cli(store_url: str, capsys: pytest.CaptureFixture[str]) -> CLI:
    if store_url.startswith("memory://"):
        pytest.skip("each CLI call opens the store anew; memory:// would start empty")
    return CLI(store_url, capsys)


def test_walk_through(cli: CLI) -> None:
    owner = cli.json("own", KEY, "--owner", "planner")
    assert owner["owner"] == "planner"  # type: ignore[index]
    r1 = cli.json("put", KEY, "--value", '{"destination": "Lisbon"}', "--as", "planner")
    r1_id = r1["id"]  # type: ignore[index]
    code, out, _ = cli("put", KEY, "--value", '"Porto"', "--as", "planner", "--parents", r1_id)
    assert code == 0
    r2_id = out.strip()
    assert len(r2_id) == 64
    head = cli.json("head", KEY)
    assert head == {
        "key": KEY,
        "owner": "planner",
        "head": r2_id,
        "version": 2,
        "epoch": 1,
        "signed": False,
        "owner_from": "planner",
        "owner_signed": False,
    }
    code, out, _ = cli("head", KEY)
    assert out.strip() == r2_id
    got = cli.json("get", r2_id)
    assert got["parents"] == [r1_id]  # type: ignore[index]
    code, out, _ = cli("get", r2_id)
    assert f"parent:     {r1_id}" in out
    keys = cli.json("keys")
    assert [k["key"] for k in keys] == [KEY]  # type: ignore[union-attr,index]
    lineage = cli.json("lineage", r2_id)
    assert set(lineage["records"]) == {r1_id, r2_id}  # type: ignore[index]
    code, out, _ = cli("lineage", r2_id)
    assert code == 0
    assert out.splitlines()[1].startswith(f"└─ {r1_id[:12]}")
    changes = cli.json("changes")
    assert [c["kind"] for c in changes] == ["owner", "head", "head"]  # type: ignore[union-attr,index]
    moved = cli.json("transfer", KEY, "--to", "reviewer", "--as", "planner")
    assert (moved["owner"], moved["epoch"]) == ("reviewer", 2)  # type: ignore[index]
    put3 = cli.json("put", KEY, "--value", "3", "--as", "reviewer", "--expect", r2_id)
    assert put3["value"] == 3  # type: ignore[index]
    code, out, _ = cli("keys")
    assert out.startswith(f"{KEY}\treviewer\tv3\t")


def test_bad_inputs(cli: CLI) -> None:
    assert cli("own", KEY, "--owner", "planner")[0] == 0
    r1 = cli.json("put", KEY, "--value", "1", "--as", "planner")["id"]  # type: ignore[index]
    cli.fails("put", KEY, "--value", "2", "--as", "mallory", match="not the owner")
    cli.fails(
        "put",
        KEY,
        "--value",
        "2",
        "--as",
        "planner",
        "--expect",
        "none",
        match="someone else advanced",
    )
    cli.fails("put", KEY, "--value", "2", "--as", "planner", "--expect", "f" * 64, match=r1)
    cli.fails("put", KEY, "--value", "{not json", "--as", "planner", match="not valid JSON")
    cli.fails("put", KEY, "--value", "NaN", "--as", "planner", match="not JSON")
    cli.fails(
        "put", KEY, "--value", "1", "--as", "planner", "--expect", "xyz", match="is not a record id"
    )
    cli.fails("put", KEY, "--value", "1", "--as", "planner", "--parents", "e" * 64, match="unknown")
    cli.fails("put", "bad key", "--value", "1", "--as", "planner", match="invalid key")
    cli.fails("put", "nobody/owns", "--value", "1", "--as", "planner", match="no owner")
    cli.fails("own", KEY, "--owner", "x", match="already has an owner")
    cli.fails("own", "a//b", "--owner", "x", match="invalid key")
    cli.fails("own", "ok/key", "--owner", "bad agent", match="invalid agent")
    cli.fails("transfer", KEY, "--to", "x", "--as", "mallory", match="not the owner")
    cli.fails("get", "e" * 64, match="unknown record")
    cli.fails("get", "short", match="is not a record id")
    cli.fails("lineage", "e" * 64, match="unknown record")
    cli.fails("head", "nobody/owns", match="no owner")
    cli.fails("head", "/bad", match="invalid key")
    assert cli.json("head", KEY)["head"] == r1  # type: ignore[index]


def test_bad_store_url(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["memory", "keys", "--store", "mysql://x"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "unsupported store URL" in err[0]


def test_console_script_subprocess(tmp_path: Path) -> None:
    """The installed entry point, in a fresh process, with the store from $PLANFENCE_STORE."""
    env = {**os.environ, "PLANFENCE_STORE": f"sqlite:///{tmp_path / 's.db'}"}
    run = [
        sys.executable,
        "-c",
        "import sys; from planfence.adapters.cli.main import main; sys.exit(main())",
    ]

    def call(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*run, "memory", *argv],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )

    assert call("own", KEY, "--owner", "planner").returncode == 0
    bad = call("put", KEY, "--value", "1", "--as", "mallory")
    assert bad.returncode == 1
    assert bad.stderr.strip().count("\n") == 0
    assert "'mallory' is not the owner" in bad.stderr
    ok = call("put", KEY, "--value", "[1, 2]", "--as", "planner", "--json")
    assert json.loads(ok.stdout)["value"] == [1, 2]
    assert (tmp_path / "s.db").exists()


def test_transfer_and_signed_put(cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from planfence.adapters.owner_service import PublicKeyring, SigningKey
    from planfence.shared_memory import open_store
    from planfence.shared_memory.signing import head_signed_by

    assert cli("own", KEY, "--owner", "planner")[0] == 0
    monkeypatch.delenv("PLANFENCE_AGENT", raising=False)
    code, _, err = cli("transfer", KEY, "--to", "reviewer")
    assert code == 2 and err.strip().splitlines() == [
        "planfence: error: say who hands the key over: --as AGENT (or set $PLANFENCE_AGENT)"
    ]
    monkeypatch.setenv("PLANFENCE_AGENT", "mallory")
    cli.fails("transfer", KEY, "--to", "reviewer", match="not the owner")
    monkeypatch.setenv("PLANFENCE_AGENT", "planner")
    code, out, _ = cli("transfer", KEY, "--to", "reviewer")
    assert (code, out.strip()) == (0, f"{KEY}: owner reviewer (was planner), epoch 2")
    assert cli.json("keys")[0]["epoch"] == 2  # type: ignore[index]

    key = SigningKey.generate("reviewer")
    key.save(tmp_path / "reviewer.jwk")
    other = SigningKey.generate("planner")
    other.save(tmp_path / "planner.jwk")
    signed = ("--as", "reviewer", "--signing-key")
    code, _, err = cli("put", KEY, "--value", "1", *signed, str(tmp_path / "planner.jwk"))
    assert code == 2 and "holds 'planner'" in err
    rec = cli.json("put", KEY, "--value", "1", *signed, str(tmp_path / "reviewer.jwk"))
    head = cli.json("head", KEY)
    assert (head["head"], head["epoch"], head["signed"]) == (rec["id"], 2, True)  # type: ignore[index]
    ring = PublicKeyring({"keys": [key.public_jwk()]})
    with open_store(cli.url) as store:
        state = store.states([KEY])[KEY]
    assert head_signed_by(ring, "reviewer", KEY, state.head, 1, 2, state.head_sig)


def test_signed_own_and_transfer_prove_the_owner(cli: CLI, tmp_path: Path) -> None:
    from planfence.adapters.owner_service import PublicKeyring, SigningKey
    from planfence.shared_memory import GetOwnerChanges, open_store
    from planfence.shared_memory.signing import owner_signed_by

    keys = {a: SigningKey.generate(a) for a in ("admin", "planner", "reviewer")}
    for agent, k in keys.items():
        k.save(tmp_path / f"{agent}.jwk")
    ring = PublicKeyring({"keys": [k.public_jwk() for k in keys.values()]})
    own = ("own", KEY, "--owner", "planner", "--as", "admin", "--signing-key")
    code, _, err = cli(*own, str(tmp_path / "planner.jwk"))
    assert code == 2 and "holds 'planner'" in err and "not 'admin'" in err
    assert cli(*own, str(tmp_path / "admin.jwk"))[0] == 0
    hand = ("transfer", KEY, "--to", "reviewer", "--as", "planner", "--signing-key")
    code, _, err = cli(*hand, str(tmp_path / "reviewer.jwk"))
    assert code == 2 and "holds 'reviewer'" in err
    assert cli(*hand, str(tmp_path / "planner.jwk"))[0] == 0
    head = cli.json("head", KEY)
    assert (head["owner_from"], head["owner_signed"]) == ("planner", True)  # type: ignore[index]
    with open_store(cli.url) as store:
        [chain] = store.read([GetOwnerChanges(KEY, 0)])
        state = store.states([KEY])[KEY]
    assert [(c.owner, c.by, c.epoch) for c in chain] == [
        ("planner", "admin", 1),
        ("reviewer", "planner", 2),
    ]
    assert owner_signed_by(ring, KEY, "planner", 1, "admin", chain[0].sig)
    assert owner_signed_by(ring, KEY, "reviewer", 2, "planner", state.owner_sig)
    assert not owner_signed_by(ring, KEY, "reviewer", 2, "admin", state.owner_sig)
