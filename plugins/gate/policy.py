"""Declared scopes: which public keys each tool's call depends on.

Declared in application code or a TOML policy file, never by generated text:

    [tools.ship_order]
    depends_on = ["order/{order_id}", "address/{customer}"]

    [tools.get_weather]
    ungated = true          # explicitly exempt (read-only tools)

    [tools.deploy]
    depends_on = ["build/{service}"]
    lease_ms = 2000         # on allow, hold the heads of D(a) until the tool returns (at most 2 s)
    agents = ["executor"]   # only these agents may call it (others: agent_not_allowed)

Templates are filled from the call's arguments (`{order_id}`, `{customer.id}` for nested values).
A placeholder fills one key segment; `{path:path}` takes a value with `/` as several segments
(`clock/{tz:path}` with `Europe/Lisbon`), and `{url:enc}` any text, encoded into one segment
(`encode_segment`: URLs, e-mail addresses, free text).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from planfence.shared_memory import ConfigError, InvalidKeyError
from planfence.shared_memory.leases import MAX_LEASE_MS
from planfence.shared_memory.records import validate_agent

from .templates import (
    CONVERTORS,
    ENC,
    PATH,
    SEGMENT,
    KeyTemplate,
    ScopeError,
    decode_segment,
    encode_segment,
)

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


# Tool names: matched with `fullmatch` only.
_TOOL_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-/]*")


@dataclass(frozen=True)
class ToolPolicy:
    """What one tool depends on, or that it is explicitly exempt; `lease_ms`: how long an
    allowed call may hold its keys' heads (None: no lease)."""

    name: str
    depends_on: tuple[KeyTemplate, ...] = ()
    ungated: bool = False
    lease_ms: int | None = None
    agents: frozenset[str] | None = None
    """The only agents that may call the tool (None: any); others are blocked
    (`agent_not_allowed`), and so is a call that names no agent."""

    def __post_init__(self) -> None:
        if self.ungated == bool(self.depends_on):
            raise PolicyError(
                f"tool {self.name!r}: declare depends_on (at least one key template) "
                "or ungated = true, not both or neither"
            )
        if self.lease_ms is not None:
            try:
                _check_lease_ms(self.lease_ms, self.ungated)
            except ValueError as exc:
                raise PolicyError(f"tool {self.name!r}: {exc}") from None

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
        self,
        tool: str,
        depends_on: Iterable[str] = (),
        *,
        ungated: bool = False,
        lease_ms: int | None = None,
    ) -> Policy:
        """A new policy with `tool` declared (policies are immutable)."""
        spec: dict[str, Any] = {"depends_on": list(depends_on), "ungated": ungated}
        if lease_ms is not None:
            spec["lease_ms"] = lease_ms
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
            if tp.ungated:
                tools[name] = {"ungated": True}
                continue
            tools[name] = {"depends_on": [t.text for t in tp.depends_on]}
            if tp.lease_ms is not None:
                tools[name]["lease_ms"] = tp.lease_ms
        for name, tp in self.tools.items():
            if tp.agents is not None:
                tools[name]["agents"] = sorted(tp.agents)
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
        if line is not None and isinstance(exc, _FieldError):
            line = _line_in_table(text, line, exc.field, exc.literal) or line
        raise PolicyError(f"[tools.{name}]: {exc}", source=source, line=line) from None


class _FieldError(ValueError):
    """A problem with one field of a tool's declaration (and, in a list, with one literal of
    it), so the error can point at the line that holds it."""

    def __init__(self, message: str, field: str, literal: str | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.literal = literal


def _tool_policy(name: object, spec: object, source: str) -> ToolPolicy:
    if not isinstance(name, str) or not _TOOL_RE.fullmatch(name):
        raise ValueError(f"invalid tool name {name!r}")
    if not isinstance(spec, Mapping):
        raise ValueError("a tool declaration must be a table with depends_on or ungated")
    unknown = set(spec) - {"depends_on", "ungated", "description", "lease_ms", "agents"}
    if unknown:
        first = sorted(unknown)[0]
        raise _FieldError(
            f"unknown field {first!r} (expected depends_on, ungated, lease_ms, agents)", first
        )
    ungated = spec.get("ungated", False)
    if not isinstance(ungated, bool):
        raise _FieldError("ungated must be true or false", "ungated")
    deps = spec.get("depends_on", [])
    if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
        raise _FieldError("depends_on must be a list of key templates (strings)", "depends_on")
    if ungated and deps:
        raise _FieldError("a tool is either ungated or has depends_on, not both", "depends_on")
    if not ungated and not deps:
        if "depends_on" in spec:
            raise _FieldError("depends_on is empty: give at least one key template", "depends_on")
        raise ValueError("declare depends_on (at least one key template) or ungated = true")
    templates = []
    for d in deps:
        try:
            templates.append(KeyTemplate.parse(d))
        except ValueError as exc:  # InvalidKeyError among them
            raise _FieldError(str(exc), "depends_on", d) from None
    lease_ms = spec.get("lease_ms")
    if lease_ms is not None:
        try:
            _check_lease_ms(lease_ms, ungated)
        except ValueError as exc:
            raise _FieldError(str(exc), "lease_ms") from None
    return ToolPolicy(name, tuple(templates), ungated, lease_ms, _agents(spec.get("agents")))


def _agents(value: object) -> frozenset[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value or not all(isinstance(a, str) for a in value):
        raise _FieldError(
            'agents must be a non-empty list of agent ids, e.g. ["executor"]', "agents"
        )
    try:
        return frozenset(validate_agent(a) for a in value)
    except InvalidKeyError as exc:
        raise _FieldError(f"agents: {exc}", "agents") from None


def _check_lease_ms(lease_ms: object, ungated: bool) -> None:
    if isinstance(lease_ms, bool) or not isinstance(lease_ms, int):
        raise ValueError(f"lease_ms must be a whole number of milliseconds, not {lease_ms!r}")
    if not 0 < lease_ms <= MAX_LEASE_MS:
        raise ValueError(f"lease_ms must be between 1 and {MAX_LEASE_MS}, not {lease_ms}")
    if ungated:
        raise ValueError("lease_ms needs depends_on: an ungated tool has no heads to lease")


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


def _line_in_table(text: str, start: int, field: str, literal: str | None) -> int | None:
    """The line, from the tool's own line `start` up to the next table, that holds `literal`
    (a string of `field`'s list) or else that assigns `field` (None: not found)."""
    lines = text.splitlines()
    assign = re.compile(rf"(^|[\s{{,.]){re.escape(field)}\s*=")
    found_field: int | None = None
    for i in range(start, len(lines) + 1):
        line = lines[i - 1]
        if i > start and re.match(r"\s*\[", line):
            break
        if found_field is None and assign.search(line):
            found_field = i
        if literal is not None and found_field is not None and _holds_literal(line, literal):
            return i
    return found_field


def _holds_literal(line: str, literal: str) -> bool:
    """Whether a TOML line holds the string `literal`, in any of TOML's quotings."""
    quoted = (json.dumps(literal), f"'{literal}'", f'"{literal}"')
    return any(q in line for q in quoted)


def _line_from_message(msg: str) -> int | None:
    m = re.search(r"line (\d+)", msg)
    return int(m.group(1)) if m else None


__all__ = [
    "CONVERTORS",
    "ENC",
    "PATH",
    "SEGMENT",
    "KeyTemplate",
    "Policy",
    "PolicyError",
    "ScopeError",
    "ToolPolicy",
    "decode_segment",
    "encode_segment",
]
