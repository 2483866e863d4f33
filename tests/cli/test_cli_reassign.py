"""`planfence memory reassign`: an assigner takes a key over (signed), a stale --from-epoch or
another agent's key is one error line, and the old owner can no longer write."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planfence.adapters.cli.main import main
from planfence.adapters.owner_service import PublicKeyring, SigningKey
from planfence.shared_memory import open_store
from planfence.shared_memory.signing import owner_signed_by


def test_reassign_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'team.db'}"
    admin = SigningKey.generate("admin")
    admin_file = tmp_path / "admin.jwk"
    admin.save(admin_file)
    assert main(["memory", "own", "fleet/0", "--owner", "old", "--store", url]) == 0
    assert main(["memory", "put", "fleet/0", "--as", "old", "--value", "1", "--store", url]) == 0
    capsys.readouterr()
    argv = ["memory", "reassign", "fleet/0", "--to", "new", "--as", "admin", "--store", url]
    assert main([*argv, "--signing-key", str(admin_file), "--from-epoch", "1", "--json"]) == 0
    done = json.loads(capsys.readouterr().out)
    assert (done["owner"], done["by"], done["epoch"], done["previous_owner"]) == (
        "new",
        "admin",
        2,
        "old",
    )
    ring = PublicKeyring({"keys": [admin.public_jwk()]})
    assert owner_signed_by(ring, "fleet/0", "new", 2, "admin", done["sig"])
    # A second assigner acting on the epoch it saw: refused, nothing written.
    assert main([*argv, "--from-epoch", "1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("planfence: error: ") and err.count("\n") == 1
    assert "owner epoch 2, not 1" in err
    # A key that is not the assigner's: a usage error.
    other = tmp_path / "other.jwk"
    SigningKey.generate("mallory").save(other)
    assert main([*argv, "--signing-key", str(other)]) == 2
    assert "'mallory'" in capsys.readouterr().err
    # The old owner is fenced.
    assert main(["memory", "put", "fleet/0", "--as", "old", "--value", "2", "--store", url]) == 1
    assert "is not the owner" in capsys.readouterr().err
    with open_store(url) as store:
        assert (store.owner("fleet/0"), store.epoch("fleet/0")) == ("new", 2)
