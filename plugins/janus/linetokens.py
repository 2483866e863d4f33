"""Token ids of a multi-line text assembled from its lines' ids, each line tokenised once.

A cheatsheet grows a line at a time, so a controller meets thousands of texts that share most
of their lines; tokenising every text whole costs a BPE pass over all of it. For a tokenizer of
WordLlama's kind (SentencePiece-style BPE: the normaliser prepends "▁" and turns spaces into
"▁", no pre-tokenizer, byte fallback) the newline is only ever the byte token `<0x0A>` and no
merge involves it, so BPE never joins anything across a newline and the ids of a text are its
lines' ids joined by that token. `LineTokenizer.ids` returns exactly what the tokenizer would;
it checks the tokenizer's definition when built and, when anything differs from that kind (or a
text holds a special token such as "<s>", which the tokenizer splits out before normalising),
tokenises the text whole.
"""

from __future__ import annotations

import json
from typing import Any

NEWLINE_TOKEN = "<0x0A>"
_NORMALIZER = {
    "type": "Sequence",
    "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
    ],
}


def _merge_pair(merge: Any) -> tuple[str, str]:
    if isinstance(merge, str):
        left, _, right = merge.partition(" ")
        return left, right
    return str(merge[0]), str(merge[1])


def newline_splits(definition: dict[str, Any]) -> tuple[int, int] | None:
    """(id of "▁", id of the newline byte) when the tokenizer defined by `definition` (its
    JSON form) never merges across a newline; None otherwise."""
    model = definition.get("model") or {}
    if (
        definition.get("normalizer") != _NORMALIZER
        or definition.get("pre_tokenizer") is not None
        or model.get("type") != "BPE"
        or model.get("dropout") not in (None, 0.0)
        or not model.get("byte_fallback")
        or model.get("continuing_subword_prefix")
        or model.get("end_of_word_suffix")
    ):
        return None
    vocab: dict[str, int] = model.get("vocab") or {}
    if NEWLINE_TOKEN not in vocab or "\u2581" not in vocab:
        return None
    if any("\n" in token for token in vocab):
        return None
    for merge in model.get("merges") or []:
        left, right = _merge_pair(merge)
        if NEWLINE_TOKEN in (left, right) or "\n" in left or "\n" in right:
            return None
    return vocab["\u2581"], vocab[NEWLINE_TOKEN]


class LineTokenizer:
    """Token ids (no special tokens added) of texts, line by line where that is exact."""

    def __init__(self, tokenizer: Any, *, max_lines: int = 100_000) -> None:
        self.tokenizer = tokenizer
        self.max_lines = max_lines
        definition = json.loads(tokenizer.to_str())
        self._split = newline_splits(definition)
        self._special = [t["content"] for t in definition.get("added_tokens") or []]
        self._lines: dict[tuple[str, bool], list[int]] = {}

    @property
    def by_line(self) -> bool:
        """Whether multi-line texts are assembled from their lines."""
        return self._split is not None

    def whole(self, text: str) -> list[int]:
        ids: list[int] = self.tokenizer.encode(text, add_special_tokens=False).ids
        return ids

    def _line(self, line: str, split: tuple[int, int], *, first: bool) -> list[int] | None:
        """Ids of `line` as part of a multi-line text: the first line is normalised with "▁"
        before it (as the whole text is), a later one follows a newline and gets none.
        None if the tokenizer does not tokenise a line as checked (then whole texts it is)."""
        key = (line, first)
        ids = self._lines.get(key)
        if ids is None:
            if first:
                # An empty first line leaves the prepended "▁" alone before the newline.
                ids = self.whole(line) if line else [split[0]]
            else:
                got = self.whole("\n" + line)
                if got[:2] != list(split):  # never for a tokenizer that passed the check
                    self._split = None
                    return None
                ids = got[2:]
            if len(self._lines) >= self.max_lines:
                self._lines.clear()
            self._lines[key] = ids
        return ids

    def ids(self, text: str) -> list[int]:
        split = self._split
        if split is None or "\n" not in text or any(s in text for s in self._special):
            return self.whole(text)
        first, *rest = text.split("\n")
        head = self._line(first, split, first=True)
        if head is None:
            return self.whole(text)
        out = list(head)
        for line in rest:
            ids = self._line(line, split, first=False)
            if ids is None:
                return self.whole(text)
            out.append(split[1])
            out.extend(ids)
        return out
