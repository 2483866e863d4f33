"""Declared scopes: which public keys each tool's call depends on.

Declared in application code or a TOML policy file, never by generated text:

    [tools.ship_order]
    depends_on = ["order/{order_id}", "address/{customer}"]

    [tools.get_weather]
    ungated = true          # explicitly exempt (read-only tools)

Templates are filled from the call's arguments (`{order_id}`, `{customer.id}` for nested values).
A placeholder fills one key segment; `{path:path}` takes a value with `/` as several segments
(`clock/{tz:path}` with `Europe/Lisbon`), and `{url:enc}` any text, encoded into one segment
(`encode_segment`: URLs, e-mail addresses, free text).
"""

from __future__ import annotations

import re
import string
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from planfence.shared_memory import ConfigError, InvalidKeyError, PlanFenceError, validate_key

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class PolicyError(ConfigError):
    """A policy that cannot be loaded; carries the file and line when known."""

    def __init__(self, message: str, *, source: str = "<policy>", line: int | None = None) -> None:
        self.source = source
        self.line = line
        where = f"{source}:{line}" if line else source
        super().__init__(f"{where}: {message}")


class ScopeError(PlanFenceError, ValueError):
    """A template whose argument is missing or does not form a valid key."""


# Matched with `fullmatch` only: a `$` anchor would also accept a final newline.
_FIELD_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*|\.[0-9]+)*")
_PLACEHOLDER_RE = re.compile(r"\{([^{}:]+)(?::([^{}]*))?\}")
_TOOL_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-/]*")
_SEGMENT_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-:@+=]*")

# How a placeholder turns an argument into key text (the part after the colon).
SEGMENT = "segment"  # the default: exactly one key segment, as given
PATH = "path"  # a value with '/' fills several segments
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
    that is empty or starts with `=` gets a leading `_`. So `Europe/Lisbon` is
    `Europe=2FLisbon`, `ana@example.com` stays as it is, and `""` is `_`.
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
    checked (none empty, `.` or `..`); `{name:enc}` any text, encoded into one segment
    (`encode_segment`). `name` may reach into nested arguments: `{customer.id}`, `{items.0}`.
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
        # One pass over the template: an argument value is never read as a placeholder itself.
        out = _PLACEHOLDER_RE.sub(lambda m: values[m.group(1), m.group(2) or SEGMENT], self.text)
        try:
            return validate_key(out)
        except InvalidKeyError as exc:
            plain = dict.fromkeys(n for n, kind in values if kind != ENC)
            hint = ", ".join(f"{{{n}:enc}}" for n in plain)
            more = f" ({hint} takes any text)" if hint else ""
            raise ScopeError(f"{self.text!r} filled to an invalid key: {exc}{more}") from None


def _convert(name: str, kind: str, text: str) -> str:
    if kind == ENC:
        return encode_segment(text)
    if kind == PATH:
        segments = text.split("/")
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
        return text
    if not text or "/" in text:
        why = "it is empty" if not text else f"it has '/' ({{{name}:path}} takes it as segments)"
        raise ScopeError(
            f"argument {name!r} = {text!r} cannot name a key segment: {why}; "
            f"{{{name}:enc}} takes any text"
        )
    return text


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


@dataclass(frozen=True)
class ToolPolicy:
    """What one tool depends on, or that it is explicitly exempt."""

    name: str
    depends_on: tuple[KeyTemplate, ...] = ()
    ungated: bool = False

    def __post_init__(self) -> None:
        if self.ungated == bool(self.depends_on):
            raise PolicyError(
                f"tool {self.name!r}: declare depends_on (at least one key template) "
                "or ungated = true, not both or neither"
            )

    def scope(self, args: Mapping[str, Any]) -> tuple[str, ...]:
        """The keys D(a) for a call with `args`. Raises `ScopeError`."""
        fixed = self._fixed_scope
        if fixed is not None:
            return fixed
        return tuple(sorted({t.fill(args) for t in self.depends_on}))

    @cached_property
    def _fixed_scope(self) -> tuple[str, ...] | None:
        """D(a) of a tool whose templates have no placeholders: filling them never reads the
        arguments, so every call has the same scope (None: it depends on the arguments, or the
        templates do not fill, and each call fills them again and fails the same way)."""
        if any(t.fields for t in self.depends_on):
            return None
        try:
            return tuple(sorted({t.fill({}) for t in self.depends_on}))
        except Exception:
            return None


@dataclass(frozen=True)
class Policy:
    tools: Mapping[str, ToolPolicy] = field(default_factory=dict)
    source: str = "<code>"

    def get(self, tool: str) -> ToolPolicy | None:
        return self.tools.get(tool)

    def declare(
        self, tool: str, depends_on: Iterable[str] = (), *, ungated: bool = False
    ) -> Policy:
        """A new policy with `tool` declared (policies are immutable)."""
        spec = {"depends_on": list(depends_on), "ungated": ungated}
        tp = _declared(tool, spec, self.source, "")
        return Policy({**self.tools, tool: tp}, self.source)

    @property
    def tool_names(self) -> tuple[str, ...]:
        """The tools this policy declares (gated or ungated), sorted."""
        return tuple(sorted(self.tools))

    def uncovered_tools(self, names: Iterable[str]) -> list[str]:
        """Of `names` (e.g. an upstream's tools), in their order, those the policy does not
        declare: every call to them is blocked as `undeclared_tool`."""
        return list(dict.fromkeys(n for n in names if n not in self.tools))

    def unused_tools(self, names: Iterable[str]) -> list[str]:
        """Declared tools that are not among `names`: likely a typo or a removed tool."""
        present = set(names)
        return [n for n in self.tool_names if n not in present]

    def to_dict(self) -> dict[str, Any]:
        """The `from_dict` form, so a policy can travel inside configs and over wires."""
        tools: dict[str, Any] = {}
        for name, tp in self.tools.items():
            tools[name] = (
                {"ungated": True} if tp.ungated else {"depends_on": [t.text for t in tp.depends_on]}
            )
        return {"tools": tools}

    @classmethod
    def coerce(cls, policy: Policy | Mapping[str, Any] | str) -> Policy:
        """A `Policy`, its dict form, or TOML text."""
        if isinstance(policy, Policy):
            return policy
        if isinstance(policy, str):
            return cls.from_toml(policy)
        return cls.from_dict(policy)

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, source: str = "<code>", text: str = ""
    ) -> Policy:
        """Build from `{"tools": {name: {"depends_on": [...], "ungated": bool}}}`."""
        if not isinstance(data, Mapping):
            raise PolicyError("a policy must be a table", source=source)
        unknown = set(data) - {"tools"}
        if unknown:
            raise PolicyError(
                f"unknown top-level entry {sorted(unknown)[0]!r} (expected [tools.NAME])",
                source=source,
                line=_line_of(text, sorted(unknown)[0], table=""),
            )
        tools = data.get("tools", {})
        if not isinstance(tools, Mapping):
            raise PolicyError("'tools' must be a table of tool declarations", source=source)
        out: dict[str, ToolPolicy] = {}
        for name, spec in tools.items():
            out[name] = _declared(name, spec, source, text)
        return cls(out, source)

    @classmethod
    def from_toml(cls, text: str, *, source: str = "<policy>") -> Policy:
        return cls.from_dict(_parse_toml(text, source), source=source, text=text)

    @classmethod
    def load(cls, path: str | Path) -> Policy:
        """Read and validate a TOML policy file; every key template is checked here, not at
        call time.

        Raises:
            PolicyError: the first problem, with the file, line, tool and template.
        """
        p = Path(path)
        return cls.from_toml(_read_policy(p), source=str(p))

    @classmethod
    def lint(cls, path: str | Path) -> list[PolicyError]:
        """Every problem in the policy file at `path`, in file order (empty: `load` succeeds).

        Unlike `load`, which stops at the first problem, each tool entry is checked on its own.
        """
        p, source = Path(path), str(path)
        try:
            text = _read_policy(p)
            data = _parse_toml(text, source)
        except PolicyError as exc:
            return [exc]
        tools = data.get("tools", {})
        problems: list[PolicyError] = []
        try:  # everything but the tool entries, which are checked one by one below
            rest = {k: v for k, v in data.items() if k != "tools" or not isinstance(tools, Mapping)}
            cls.from_dict(rest, source=source, text=text)
        except PolicyError as exc:
            problems.append(exc)
        if isinstance(tools, Mapping):
            for name, spec in tools.items():
                try:
                    _declared(name, spec, source, text)
                except PolicyError as exc:
                    problems.append(exc)
        return sorted(problems, key=lambda e: e.line or 0)


def _parse_toml(text: str, source: str) -> dict[str, Any]:
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line = getattr(exc, "lineno", None) or _line_from_message(str(exc))
        if line is None and "end of document" in str(exc):
            line = text.count("\n") + 1
        raise PolicyError(f"invalid TOML: {exc}", source=source, line=line) from None
    return data


def _read_policy(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyError(f"cannot read policy file: {exc.strerror}", source=str(path)) from None
    except UnicodeDecodeError:
        raise PolicyError("policy file is not UTF-8 text", source=str(path)) from None


def _declared(name: object, spec: object, source: str, text: str) -> ToolPolicy:
    """`_tool_policy`, with any problem raised as a `PolicyError` naming the tool (and, with the
    policy's text, its line)."""
    try:
        return _tool_policy(name, spec, source)
    except PolicyError:
        raise
    except (ValueError, TypeError) as exc:
        line = _line_of(text, name) if isinstance(name, str) else None
        raise PolicyError(f"[tools.{name}]: {exc}", source=source, line=line) from None


def _tool_policy(name: object, spec: object, source: str) -> ToolPolicy:
    if not isinstance(name, str) or not _TOOL_RE.fullmatch(name):
        raise ValueError(f"invalid tool name {name!r}")
    if not isinstance(spec, Mapping):
        raise ValueError("a tool declaration must be a table with depends_on or ungated")
    unknown = set(spec) - {"depends_on", "ungated", "description"}
    if unknown:
        raise ValueError(f"unknown field {sorted(unknown)[0]!r} (expected depends_on, ungated)")
    ungated = spec.get("ungated", False)
    if not isinstance(ungated, bool):
        raise ValueError("ungated must be true or false")
    deps = spec.get("depends_on", [])
    if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
        raise ValueError("depends_on must be a list of key templates (strings)")
    if ungated and deps:
        raise ValueError("a tool is either ungated or has depends_on, not both")
    if not ungated and not deps:
        raise ValueError("declare depends_on (at least one key template) or ungated = true")
    try:
        templates = tuple(KeyTemplate.parse(d) for d in deps)
    except InvalidKeyError as exc:
        raise ValueError(str(exc)) from None
    return ToolPolicy(name, templates, ungated)


def _line_of(text: str, name: str, table: str = "tools.") -> int | None:
    """Line where `[<table>name]` (or `name =`) is declared in the policy text."""
    if not text:
        return None
    quoted = rf"\"?{re.escape(name)}\"?"
    pat = re.compile(rf"^\s*\[\s*{re.escape(table)}{quoted}\s*[.\]]|^\s*{quoted}\s*=")
    for i, line in enumerate(text.splitlines(), start=1):
        if pat.search(line):
            return i
    return None


def _line_from_message(msg: str) -> int | None:
    m = re.search(r"line (\d+)", msg)
    return int(m.group(1)) if m else None
