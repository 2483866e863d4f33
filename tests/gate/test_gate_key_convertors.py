"""Every key a placeholder's convertor fills is a key the store takes (`planfence memory own`
included), and distinct argument values never fill to the same key: `/notes/a.txt` and
`notes/a.txt` are two keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planfence.adapters.cli.main import main
from planfence.plugins.gate.templates import KeyTemplate, ScopeError, encode_segment
from planfence.shared_memory.records import validate_key

TEMPLATES = {
    kind: KeyTemplate.parse(f"k/{{v{':' + kind if kind else ''}}}") for kind in ("", "path", "enc")
}

# Text with the characters that matter: separators, dots, the root and escape marks, non-ASCII.
TEXT = st.text(alphabet="aZ09_.-:@+=/ %é\n\x00", max_size=24)
SEGMENT = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.\-:@+=]{0,8}", fullmatch=True).filter(
    lambda s: s not in (".", "..")
)
PATHS = st.builds(
    lambda absolute, parts: ("/" if absolute else "") + "/".join(parts),
    st.booleans(),
    st.lists(SEGMENT, min_size=1, max_size=5),
)


def fill(kind: str, value: str) -> str | None:
    try:
        return TEMPLATES[kind].fill({"v": value})
    except ScopeError:
        return None


@given(TEXT)
def test_every_convertor_fills_keys_the_validator_accepts(text: str) -> None:
    for kind in TEMPLATES:
        key = fill(kind, text)
        if key is not None:
            assert validate_key(key) == key
    assert fill("enc", text) == "k/" + encode_segment(text)  # :enc takes any (short) text


@given(PATHS)
def test_every_path_of_key_segments_fills_unless_it_reads_as_the_other_kind(path: str) -> None:
    key = fill("path", path)
    if path.startswith("_/") or path == "_":
        assert key is None  # relative, but spelled like an absolute path's segments
    else:
        assert key is not None and validate_key(key) == key


@given(st.sampled_from(sorted(TEMPLATES)), TEXT | PATHS, TEXT | PATHS)
def test_distinct_values_fill_distinct_keys(kind: str, a: str, b: str) -> None:
    ka, kb = fill(kind, a), fill(kind, b)
    if a != b and ka is not None and kb is not None:
        assert ka != kb


@pytest.mark.parametrize(
    ("value", "key"),
    [
        ("/notes/a.txt", "k/_/notes/a.txt"),
        ("notes/a.txt", "k/notes/a.txt"),
        ("/", "k/_"),
        ("_notes/a.txt", "k/_notes/a.txt"),
    ],
)
def test_absolute_paths_start_with_the_root_segment(value: str, key: str) -> None:
    assert fill("path", value) == key


def test_a_relative_path_spelled_like_an_absolute_one_is_refused() -> None:
    with pytest.raises(ScopeError, match="may not start with '_'") as info:
        TEMPLATES["path"].fill({"v": "_/notes/a.txt"})
    assert "{v:enc}" in str(info.value)


@pytest.mark.parametrize(
    ("text", "segment"),
    [("", "_"), ("/etc/hosts", "_=2Fetc=2Fhosts"), ("_tmp", "_=5Ftmp"), ("a b", "a=20b")],
)
def test_enc_examples_as_documented(text: str, segment: str) -> None:
    assert encode_segment(text) == segment


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.sampled_from(sorted(TEMPLATES)), TEXT | PATHS)
def test_memory_own_accepts_every_filled_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, value: str
) -> None:
    key = fill(kind, value)
    if key is None:
        return
    store = f"sqlite:///{tmp_path / 'own.db'}"
    assert main(["memory", "own", key, "--owner", "ana", "--store", store]) == 0, (
        capsys.readouterr().err
    )
    capsys.readouterr()
    assert main(["memory", "keys", "--store", store, "--json"]) == 0
    assert {"key": key, "owner": "ana"}.items() <= next(
        row for row in json.loads(capsys.readouterr().out) if row["key"] == key
    ).items()
