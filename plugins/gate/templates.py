"""Key templates: the keys a call depends on, filled from its arguments.

`order/{order_id}` fills one key segment from an argument; `{customer.id}` reaches into nested
arguments; `{path:path}` takes a value with `/` as several segments (an absolute path gets the
root segment `_` first: `/notes/a.txt` is `_/notes/a.txt`, `notes/a.txt` stays as it is);
`{url:enc}` takes any text, encoded into one segment (`encode_segment`).
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from planfence.shared_memory import InvalidKeyError, PlanfenceError
from planfence.shared_memory.records import DEFAULT_LIMITS, validate_key


class ScopeError(PlanfenceError, ValueError):
    """A template whose argument is missing or does not form a valid key."""


# Matched with `fullmatch` only: a `$` anchor would also accept a final newline.
_FIELD_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*|\.[0-9]+)*")
_PLACEHOLDER_RE = re.compile(r"\{([^{}:]+)(?::([^{}]*))?\}")
_SEGMENT_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-:@+=]*")

# How a placeholder turns an argument into key text (the part after the colon).
SEGMENT = "segment"  # the default: exactly one key segment, as given
PATH = "path"  # a value with '/' fills several segments
# The segment an absolute `:path` value starts with, for its leading '/'. A relative path whose
# first segment is `_` is refused, so the two kinds of path never fill to the same key.
ROOT_SEGMENT = "_"
ENC = "enc"  # any text, encoded into one segment (`encode_segment`)
CONVERTORS = (SEGMENT, PATH, ENC)

# Bytes `encode_segment` keeps as they are (anywhere but first: only letters and digits there).
_KEPT = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-:@+")
_ALNUM = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_ESCAPE_RE = re.compile(r"=([0-9A-F]{2})")


def encode_segment(text: str) -> str:
    """The `{name:enc}` encoding: any string as one valid key segment, reversibly.

    UTF-8 bytes; letters, digits and `_ . - : @ +` stay as they are (the first byte only if it
    is a letter or digit), every other byte becomes `=XX` (two uppercase hex digits). A result
    that is empty or starts with `=` gets a leading `_`, as a key segment cannot start with `=`.
    So `Europe/Lisbon` is `Europe=2FLisbon`, `ana@example.com` stays as it is,
    `/etc/hosts` is `_=2Fetc=2Fhosts`, `_tmp` is `_=5Ftmp`, and `""` is `_`.
    """
    out: list[str] = []
    # surrogatepass: JSON can carry a lone surrogate ("\ud800"), and it must encode too.
    for i, byte in enumerate(text.encode("utf-8", "surrogatepass")):
        kept = byte in _ALNUM if i == 0 else byte in _KEPT
        out.append(chr(byte) if kept else f"={byte:02X}")
    body = "".join(out)
    return "_" + body if not body or body.startswith("=") else body


def decode_segment(segment: str) -> str:
    """The text `encode_segment` encoded as `segment`.

    Raises:
        ValueError: `segment` is not an encoding `encode_segment` produces.
    """
    body = segment[1:] if segment.startswith("_") else segment
    raw = bytearray()
    pos = 0
    for m in _ESCAPE_RE.finditer(body):
        raw += body[pos : m.start()].encode("ascii", "replace")
        raw.append(int(m.group(1), 16))
        pos = m.end()
    raw += body[pos:].encode("ascii", "replace")
    try:
        text = raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        raise ValueError(f"{segment!r} is not an encoded segment") from None
    if encode_segment(text) != segment:  # only the one canonical spelling decodes
        raise ValueError(f"{segment!r} is not an encoded segment")
    return text


@dataclass(frozen=True)
class KeyTemplate:
    """A key with `{argument}` placeholders, filled from a call's arguments.

    `{name}` fills one key segment; `{name:path}` a value with `/`, as several segments, each
    checked (none empty, `.` or `..`), an absolute path with the root segment `_` first
    (`/srv/a.txt` is `_/srv/a.txt`; a relative path starting with `_/` is refused, being
    ambiguous); `{name:enc}` any text, encoded into one segment (`encode_segment`). `name` may
    reach into nested arguments: `{customer.id}`, `{items.0}`.
    """

    text: str
    fields: tuple[str, ...]
    convertors: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> KeyTemplate:
        if not isinstance(text, str) or not text:
            raise ValueError(f"key template must be a non-empty string, got {text!r}")
        fields: list[str] = []
        convertors: list[str] = []
        try:
            parsed = list(string.Formatter().parse(text))
        except ValueError as exc:
            raise ValueError(f"bad key template {text!r}: {exc}") from None
        for _literal, name, spec, conv in parsed:
            if name is None:
                continue
            if not _FIELD_RE.fullmatch(name) or conv or (spec and spec not in CONVERTORS):
                raise ValueError(
                    f"bad placeholder {{{name}{':' + spec if spec else ''}}} in {text!r}: use "
                    "{argument}, {argument.field}, {argument:path} or {argument:enc}"
                )
            fields.append(name)
            convertors.append(spec or SEGMENT)
        if not fields:
            validate_key(text)
            return cls(text, (), ())
        # A filled segment is one or more key characters, so "x" stands for any of them: when the
        # template does not even fill to a key with it, no call can ever resolve this template.
        sample = "".join(lit + ("x" if name is not None else "") for lit, name, _, _ in parsed)
        try:
            validate_key(sample)
        except InvalidKeyError:
            raise ValueError(
                f"key template {text!r} can never fill to a valid key: use segments of letters, "
                "digits and _.-:@+= separated by '/', and {argument} placeholders"
            ) from None
        return cls(text, tuple(fields), tuple(convertors))

    @property
    def parameters(self) -> tuple[str, ...]:
        """The top-level argument names the template reads, in order, once each."""
        return tuple(dict.fromkeys(f.split(".", 1)[0] for f in self.fields))

    def fill(self, args: Mapping[str, Any]) -> str:
        """The key for a call with `args`. Raises `ScopeError`, naming the convertor that would
        take a value the placeholder's own convertor refuses."""
        kinds = self.convertors or (SEGMENT,) * len(self.fields)
        values = {
            (name, kind): _convert(name, kind, _lookup(args, name))
            for name, kind in zip(self.fields, kinds, strict=True)
        }
        # Literals and placeholders, joined: an argument value is never read as a placeholder.
        parts = _pieces(self.text)
        out = parts[0] + "".join(
            values[parts[i], parts[i + 1] or SEGMENT] + parts[i + 2]
            for i in range(1, len(parts), 3)
        )
        try:
            return validate_key(out)
        except InvalidKeyError as exc:
            if len(out) > DEFAULT_LIMITS.max_key_length:  # no convertor makes a value shorter
                name, value = max(values.items(), key=lambda item: len(item[1]))
                raise ScopeError(
                    f"{self.text!r} would fill to a key of {len(out)} characters, over "
                    f"{DEFAULT_LIMITS.max_key_length} (the longest a key may be), {len(value)} "
                    f"of them from argument {name[0]!r}; no convertor shortens a value, so this "
                    "call cannot be scoped: the argument must name an item (an id, a path), not "
                    "carry content"
                ) from None
            plain = dict.fromkeys(n for n, kind in values if kind != ENC)
            hint = ", ".join(f"{{{n}:enc}}" for n in plain)
            more = f" ({hint} takes any text)" if hint else ""
            raise ScopeError(f"{self.text!r} filled to an invalid key: {exc}{more}") from None


@lru_cache(maxsize=1024)
def _pieces(text: str) -> tuple[Any, ...]:
    """`text` split at its placeholders: a literal, then (name, convertor or None, literal)
    for each placeholder."""
    return tuple(_PLACEHOLDER_RE.split(text))


def _convert(name: str, kind: str, text: str) -> str:
    if kind == ENC:
        return encode_segment(text)
    if kind == PATH:
        return _convert_path(name, text)
    if not text or "/" in text:
        why = "it is empty" if not text else f"it has '/' ({{{name}:path}} takes it as segments)"
        raise ScopeError(
            f"argument {name!r} = {text!r} cannot name a key segment: {why}; "
            f"{{{name}:enc}} takes any text"
        )
    return text


def _convert_path(name: str, text: str) -> str:
    """`{name:path}`: the path's segments; an absolute path's `/` becomes the segment `_`."""
    absolute = text.startswith("/")
    body = text[1:] if absolute else text
    if absolute and not body:
        return ROOT_SEGMENT  # the root directory itself
    segments = body.split("/")
    if any(not seg or seg in (".", "..") for seg in segments):
        raise ScopeError(
            f"argument {name!r} = {text!r} cannot name key segments: it has an empty, '.' or "
            f"'..' segment; {{{name}:enc}} takes any text as one segment"
        )
    bad = [seg for seg in segments if not _SEGMENT_RE.fullmatch(seg)]
    if bad:
        raise ScopeError(
            f"argument {name!r} = {text!r} cannot name key segments: {bad[0]!r} is not a key "
            f"segment (letters, digits and _.-:@+=); {{{name}:enc}} takes any text"
        )
    if absolute:
        return f"{ROOT_SEGMENT}/{body}"
    if segments[0] == ROOT_SEGMENT:
        raise ScopeError(
            f"argument {name!r} = {text!r} cannot name key segments: a relative path may not "
            f"start with {ROOT_SEGMENT!r}, the segment that stands for '/' "
            f"(so {'/' + body!r} and {text!r} would be one key); {{{name}:enc}} takes any text"
        )
    return body


def _lookup(args: Mapping[str, Any], path: str) -> str:
    cur: Any = args
    for part in path.split("."):
        if isinstance(cur, Mapping) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            raise ScopeError(f"argument {path!r} is missing from the call")
    if isinstance(cur, bool) or not isinstance(cur, str | int):
        raise ScopeError(f"argument {path!r} must be a string or integer, got {type(cur).__name__}")
    return str(cur)
