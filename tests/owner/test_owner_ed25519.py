"""Owners nobody has to trust with a secret: Ed25519 keys, a public keyring, JWS signatures.

Whoever holds the keyring (a gate, another team's verifier) can check every answer and forge
none; keys rotate by adding a second key and retiring the first; shared-secret keyrings still
work, with a deprecation warning.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from owner_helpers import BUDGET, POLICY, REQ, Server, free_port, seed_team, start_server

from planfence.adapters.cli.main import main
from planfence.adapters.owner_service import (
    HttpOwnerHeads,
    Keyring,
    KeyringError,
    PublicKeyring,
    SigningKey,
    load_keyring,
    verify,
)
from planfence.adapters.owner_service.keys import add_public_key, b64url, retire_key, unb64url
from planfence.adapters.owner_service.server import create_app
from planfence.adapters.owner_service.wire import (
    ANSWER_TYPE,
    REQUEST_TYPE,
    HeadsAnswer,
    new_nonce,
    now_ms,
    signed_answer,
    signed_request,
)
from planfence.plugins.gate import Gate, ToolCall
from planfence.shared_memory import open_async_store

TEAM = ("planner", "reviser", "executor")


@dataclass
class Keys:
    folder: Path
    signing: dict[str, SigningKey]
    ring: PublicKeyring

    @property
    def path(self) -> Path:
        return self.folder / "keyring.jwks"


@pytest.fixture
def keys(tmp_path: Path) -> Keys:
    signing = {a: SigningKey.generate(a) for a in TEAM}
    ring = None
    for key in signing.values():
        ring = add_public_key(tmp_path / "keyring.jwks", key)
    assert ring is not None
    return Keys(tmp_path, signing, ring)


def answer_fields(agent: str = "planner") -> dict[str, object]:
    return {
        "agent": agent,
        "nonce": new_nonce(),
        "heads": {REQ: None},
        "epochs": {REQ: 1},
        "not_owned": [],
        "at": 1,
    }


# ---- the signature format -------------------------------------------------------------------


def test_a_signed_answer_verifies_with_the_public_keyring_only(keys: Keys) -> None:
    answer = signed_answer(
        keys.signing["planner"], nonce=new_nonce(), heads={REQ: "ab" * 32}, not_owned=[], at=5
    )
    assert verify(answer, keys.ring)
    assert answer.sig.count(".") == 2 and ".." in answer.sig  # detached compact JWS
    header = json.loads(unb64url(answer.sig.split(".")[0]))
    assert header == {"alg": "EdDSA", "kid": keys.signing["planner"].kid, "typ": ANSWER_TYPE}
    # the same answer claimed by another agent, or altered, does not verify
    assert not verify(answer.model_copy(update={"agent": "reviser"}), keys.ring)
    assert not verify(answer.model_copy(update={"heads": {REQ: "cd" * 32}}), keys.ring)


def test_holding_the_keyring_is_not_enough_to_forge(keys: Keys) -> None:
    # A verifier (or a store relay) knows every public key; it makes its own key pair and
    # signs an answer "from the planner", with the planner's key id or its own.
    mallory = SigningKey.generate("planner")  # same agent name, a different key
    forged = signed_answer(mallory, nonce=new_nonce(), heads={REQ: None}, not_owned=[], at=1)
    assert not verify(forged, keys.ring)  # its key id is not in the keyring
    fields = answer_fields()
    header = {"alg": "EdDSA", "kid": keys.signing["planner"].kid, "typ": ANSWER_TYPE}
    head = b64url(json.dumps(header, sort_keys=True, separators=(",", ":")).encode())
    body = b64url(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode())
    sig = mallory._key.sign(f"{head}.{body}".encode())
    claimed = HeadsAnswer(**fields, sig=f"{head}..{b64url(sig)}")  # type: ignore[arg-type]
    assert not verify(claimed, keys.ring)


@pytest.mark.parametrize(
    "header",
    [
        {"alg": "none", "typ": ANSWER_TYPE},
        {"alg": "HS256", "typ": ANSWER_TYPE},
        {"alg": "EdDSA", "typ": REQUEST_TYPE},  # a signed request replayed as an answer
        {"alg": "EdDSA", "typ": ANSWER_TYPE, "b64": False},  # extra header members change rules
    ],
)
def test_headers_that_change_the_rules_are_refused(keys: Keys, header: dict[str, object]) -> None:
    planner = keys.signing["planner"]
    fields = answer_fields()
    full = {**header, "kid": planner.kid}
    head = b64url(json.dumps(full, sort_keys=True, separators=(",", ":")).encode())
    body = b64url(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode())
    sig = planner._key.sign(f"{head}.{body}".encode())
    assert not keys.ring.verify("planner", ANSWER_TYPE, fields, f"{head}..{b64url(sig)}")
    # control: the same construction with the right header verifies
    good = planner.sign(ANSWER_TYPE, fields)
    assert keys.ring.verify("planner", ANSWER_TYPE, fields, good)


def test_a_request_signature_does_not_pass_as_an_answer(keys: Keys) -> None:
    request = signed_request(
        keys.signing["planner"], owner="reviser", keys=[BUDGET], nonce=new_nonce(), at=now_ms()
    )
    assert verify(request, keys.ring)
    assert not keys.ring.verify("planner", ANSWER_TYPE, request.signed_fields(), request.sig)


def test_keyrings_refuse_private_keys_and_mismatched_ids(keys: Keys, tmp_path: Path) -> None:
    planner = keys.signing["planner"]
    with pytest.raises(KeyringError, match="private key"):
        PublicKeyring({"keys": [planner.private_jwk()]})
    wrong = {**planner.public_jwk(), "kid": "planner/0000000000000000"}
    with pytest.raises(KeyringError, match="does not match"):
        PublicKeyring({"keys": [wrong]})
    with pytest.raises(KeyringError, match="JWK Set"):
        PublicKeyring.parse("[]")
    assert isinstance(load_keyring(keys.path), PublicKeyring)


def test_shared_secret_keyrings_still_work_with_a_deprecation_warning() -> None:
    with pytest.warns(DeprecationWarning, match="HMAC keyrings are deprecated"):
        ring = Keyring({"planner": "s" * 16})
    answer = signed_answer(
        ring["planner"], agent="planner", nonce=new_nonce(), heads={}, not_owned=[], at=1
    )
    assert verify(answer, ring) and verify(answer, ring["planner"])


# ---- the owner service and the gate, in process ---------------------------------------------


@pytest.fixture
def team_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'team.db'}"


async def _gate_verdict(keys: Keys, url: str, *, ring: PublicKeyring | None = None) -> str:
    team = seed_team(url)
    store = await open_async_store(url)
    mounts = {
        f"http://{a}": httpx.ASGITransport(
            app=create_app(a, store, ring or keys.ring, signing_key=keys.signing[a])
        )
        for a in ("planner", "reviser")
    }
    try:
        async with httpx.AsyncClient(mounts=mounts) as client:
            heads = HttpOwnerHeads(
                {a: f"http://{a}" for a in ("planner", "reviser")},
                keys.ring,
                agent="executor",
                signing_key=keys.signing["executor"],
                client=client,
            )
            v = await Gate(store, POLICY, heads=heads).check(
                ToolCall("book_trip", {"trip": "42"}, team.plan)
            )
            return f"{v.verdict}:{v.reason}"
    finally:
        await store.aclose()


async def test_the_gate_allows_on_verified_answers(keys: Keys, team_url: str) -> None:
    assert await _gate_verdict(keys, team_url) == "allow:current"


async def test_an_owner_whose_key_was_retired_is_not_believed(
    keys: Keys, team_url: str, tmp_path: Path
) -> None:
    # The keyring the gate uses no longer holds the planner's key; the planner still signs with it.
    ring = retire_key(keys.path, keys.signing["planner"].kid)
    keys = Keys(keys.folder, keys.signing, ring)
    verdict = await _gate_verdict(keys, team_url, ring=ring)
    assert verdict == "block:owner_unauthenticated"


async def test_rotation_two_keys_verify_until_the_old_one_is_retired(
    keys: Keys, team_url: str
) -> None:
    old = keys.signing["planner"]
    new = SigningKey.generate("planner")
    ring = add_public_key(keys.path, new)
    assert {old.kid, new.kid} <= set(ring)
    for key in (old, new):
        answer = signed_answer(key, nonce=new_nonce(), heads={}, not_owned=[], at=1)
        assert verify(answer, ring)
    ring = retire_key(keys.path, old.kid)
    assert not verify(signed_answer(old, nonce=new_nonce(), heads={}, not_owned=[], at=1), ring)
    assert verify(signed_answer(new, nonce=new_nonce(), heads={}, not_owned=[], at=1), ring)


def test_a_signing_key_of_another_agent_is_refused(keys: Keys) -> None:
    with pytest.raises(KeyringError, match="is not the requesting 'executor'"):
        HttpOwnerHeads({}, keys.ring, agent="executor", signing_key=keys.signing["planner"])
    with pytest.raises(
        KeyringError, match="no secret for the requesting agent 'executor', and no signing key"
    ):
        HttpOwnerHeads({}, keys.ring, agent="executor")


# ---- the command line and real processes ---------------------------------------------------


def test_keys_generate_writes_a_private_key_only_its_owner_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "keys"
    for _ in range(2):
        assert main(["keys", "generate", "--agent", "planner", "--out", str(out), "--json"]) == 0
    first, second = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    assert first["kid"] != second["kid"] and second["keyring_kids"] == sorted(
        [first["kid"], second["kid"]]
    )
    private = Path(first["private_key"])
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert SigningKey.load(private).kid == first["kid"]
    ring = load_keyring(out / "keyring.jwks")
    assert isinstance(ring, PublicKeyring)
    stored = json.loads((out / "keyring.jwks").read_text())["keys"]
    assert all("d" not in jwk for jwk in stored)  # public halves only
    assert main(["keys", "retire", first["kid"], "--keyring", str(out / "keyring.jwks")]) == 0
    assert list(load_keyring(out / "keyring.jwks")) == [second["kid"]]
    assert main(["keys", "retire", first["kid"], "--keyring", str(out / "keyring.jwks")]) == 1
    assert "planfence: error: " in capsys.readouterr().err


@pytest.fixture
def served(keys: Keys, tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    url = f"sqlite:///{tmp_path / 'team.db'}"
    seed_team(url)
    key_files = {}
    for agent, key in keys.signing.items():
        key_files[agent] = tmp_path / f"{agent}.jwk"
        key.save(key_files[agent])
    servers: list[Server] = []
    directory = {}
    env = {k: v for k, v in os.environ.items() if k != "PLANFENCE_KEYRING"}
    try:
        for agent in ("planner", "reviser"):
            port = free_port()
            cmd = [sys.executable, "-m", "planfence.adapters.cli", "serve-owner", "--agent", agent]
            cmd += ["--store", url, "--port", str(port), "--keyring", str(keys.path)]
            cmd += ["--signing-key", str(key_files[agent])]
            servers.append(start_server(cmd, env, tmp_path / f"{agent}.log", port))
            directory[agent] = servers[-1].base_url
        yield url, directory
    finally:
        for server in servers:
            server.stop()


async def test_owner_processes_sign_with_their_keys(
    keys: Keys, served: tuple[str, dict[str, str]]
) -> None:
    url, directory = served
    store = await open_async_store(url)
    try:
        heads = HttpOwnerHeads(
            directory, keys.ring, agent="executor", signing_key=keys.signing["executor"]
        )
        answers = await heads.heads({"planner": (REQ,), "reviser": (BUDGET,)})
        assert all(a.error is None for a in answers.values()), answers
        assert answers[REQ].head == (await store.head(REQ))
        # an agent the owners do not know is refused (401), and that blocks
        stranger = SigningKey.generate("executor")
        refused = HttpOwnerHeads(directory, keys.ring, agent="executor", signing_key=stranger)
        denied = await refused.heads({"planner": (REQ,)})
        assert denied[REQ].error == "owner_unauthenticated"
        await heads.aclose()
        await refused.aclose()
    finally:
        await store.aclose()
