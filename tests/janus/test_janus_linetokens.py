"""WordLlama tokenises a multi-line text line by line (each line once) and must give exactly
the ids, and the vector, that tokenising the whole text gives."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planfence.plugins.janus import WordLlamaEncoder
from planfence.plugins.janus.encoders import wordllama_available
from planfence.plugins.janus.linetokens import LineTokenizer, newline_splits

pytestmark = pytest.mark.skipif(
    not wordllama_available(), reason="the 'embeddings' extra is not installed"
)


@pytest.fixture(scope="module")
def encoder() -> WordLlamaEncoder:
    return WordLlamaEncoder()


def whole_ids(enc: WordLlamaEncoder, text: str) -> list[int]:
    ids: list[int] = enc._model.tokenizer.encode(text, add_special_tokens=False).ids
    return ids


# Pieces that exercise the normaliser and BPE at line edges: spaces (which become "▁"),
# empty lines, a literal "▁", special-token text, non-ASCII, carriage returns, rule bullets.
PIECES = st.sampled_from(
    ["\n", "\n", " ", "  ", "-", "- ", "the", "rule", "Add", "1.", "é", "中", "▁", "\t", "\r",
     "<s>", "</s", "s>", "<unk>", "x", ":", "denominators"]
)  # fmt: skip
TEXTS = st.lists(PIECES, max_size=30).map("".join)


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=TEXTS)
def test_line_by_line_ids_and_vectors_equal_the_whole_texts(
    encoder: WordLlamaEncoder, text: str
) -> None:
    assert encoder._tokens.by_line
    assert encoder._tokens.ids(text) == whole_ids(encoder, text)
    want = encoder._model.embed([text])[0]
    got = encoder._embed(text)
    assert got.dtype == want.dtype and np.array_equal(got, want)


def test_a_growing_cheatsheet_reuses_its_lines(encoder: WordLlamaEncoder) -> None:
    tokens = LineTokenizer(encoder._model.tokenizer)
    lines = [f"- For kind {i}, convert the units before adding." for i in range(40)]
    for n in range(1, len(lines) + 1):
        text = "\n".join(lines[:n])
        assert tokens.ids(text) == whole_ids(encoder, text)
    assert len(tokens._lines) == len(lines)  # each line tokenised once, not once per text
    assert encoder.encode(["\n".join(lines)]).shape == (1, 256)


def definition(encoder: WordLlamaEncoder) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(encoder._model.tokenizer.to_str())
    return data


def test_the_shipped_tokenizer_passes_the_check(encoder: WordLlamaEncoder) -> None:
    assert newline_splits(definition(encoder)) == (
        encoder._model.tokenizer.token_to_id("\u2581"),
        encoder._model.tokenizer.token_to_id("<0x0A>"),
    )


@pytest.mark.parametrize(
    "change",
    ["merge with the newline", "a pre-tokenizer", "no byte fallback", "another normaliser"],
)
def test_a_tokenizer_that_could_merge_across_lines_is_refused(
    encoder: WordLlamaEncoder, change: str
) -> None:
    d = definition(encoder)
    if change == "merge with the newline":
        merges = d["model"]["merges"]
        merges.append("<0x0A> -" if isinstance(merges[0], str) else ["<0x0A>", "-"])
    elif change == "a pre-tokenizer":
        d["pre_tokenizer"] = {"type": "Whitespace"}
    elif change == "no byte fallback":
        d["model"]["byte_fallback"] = False
    else:
        d["normalizer"] = {"type": "Lowercase"}
    assert newline_splits(d) is None


def test_a_refused_tokenizer_tokenises_whole_texts(encoder: WordLlamaEncoder) -> None:
    from tokenizers import Tokenizer

    d = definition(encoder)
    d["normalizer"]["normalizers"].append({"type": "Lowercase"})
    tokens = LineTokenizer(Tokenizer.from_str(json.dumps(d)))
    assert not tokens.by_line
    text = "- Add THE numbers\n- Then Divide"
    assert tokens.ids(text) == tokens.whole(text)
    assert not tokens._lines
