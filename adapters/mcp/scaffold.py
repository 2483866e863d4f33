"""A first policy for an MCP server, written from its tool listing (`planfence policy init`).

One entry per tool, every suggestion marked `CONFIRM` for the author:

- a tool the server annotates `readOnlyHint` is suggested `ungated = true`;
- any other tool gets a `depends_on` suggestion from its input schema: one key per required
  argument that names what the call acts on, `<server>/{arg:path}` for a path-like argument
  (`path`, `repo_path`, `source`, ...) and `<server>/<arg>/{arg:enc}` for other text (`:enc`
  takes any text). Arguments that carry the call's payload (`content`, `message`, ...),
  optional ones (a call without them could not fill the key) and non-scalar ones are named in a
  comment instead. A tool with no such argument gets one fixed key, `<server>/<tool>`.

The text is checked with `Policy.from_toml` before it is returned: the file loads as written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from planfence.plugins.gate import Policy

# Argument names that name a file, a folder or a repository: filled with `{name:path}`.
_PATH_NAMES = frozenset(
    {
        "path",
        "paths",
        "file",
        "filename",
        "filepath",
        "dir",
        "directory",
        "folder",
        "cwd",
        "target_path",
    }
)
# Names that are paths only where the tool speaks of files (a trip has a destination too).
_MAYBE_PATH_NAMES = frozenset({"source", "destination", "dest", "src", "target", "root"})
_FILE_WORDS = re.compile(r"\b(files?|paths?|director(y|ies)|folders?)\b")
_PATH_SUFFIXES = ("_path", "_file", "_dir", "_directory", "_folder", "path")
# Argument names that carry what the call writes or says, not what it acts on.
_PAYLOAD_NAMES = frozenset(
    {
        "content",
        "contents",
        "text",
        "body",
        "message",
        "data",
        "patch",
        "diff",
        "new_text",
        "old_text",
        "edits",
        "query",
        "prompt",
        "input",
        "code",
        "comment",
        "description",
        "note",
        "notes",
        "value",
    }
)
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_SEGMENT_BAD = re.compile(r"[^A-Za-z0-9_.\-:@+=]+")


def _segment(text: str, fallback: str) -> str:
    """`text` made into one key segment (a readable one, not an encoding)."""
    cleaned = _SEGMENT_BAD.sub("-", text.strip()).strip("-.")
    if not cleaned or not re.match(r"[A-Za-z0-9_]", cleaned):
        return fallback
    return cleaned


def _toml_key(name: str) -> str:
    return name if _BARE_KEY.fullmatch(name) else json.dumps(name)


def _comment(text: str, width: int = 96) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= width else line[: width - 3].rstrip() + "..."


def _kinds(schema: Mapping[str, Any]) -> set[str]:
    kind = schema.get("type")
    kinds = {kind} if isinstance(kind, str) else set(kind) if isinstance(kind, list) else set()
    for option in schema.get("anyOf", []) or []:
        if isinstance(option, Mapping):
            kinds |= _kinds(option)
    return kinds - {"null"}


def _is_path(name: str, schema: Mapping[str, Any], about: str) -> bool:
    low = name.lower()
    if low in _PATH_NAMES or low.endswith(_PATH_SUFFIXES):
        return True
    described = str(schema.get("description", "")).lower()
    if low in _MAYBE_PATH_NAMES:
        return bool(_FILE_WORDS.search(described) or _FILE_WORDS.search(about.lower()))
    return bool(re.search(r"\bpath\b", described)) and "url" not in low


def _entry(server: str, tool: Mapping[str, Any]) -> list[str]:
    name = str(tool["name"])
    header = f"[tools.{_toml_key(name)}]"
    lines: list[str] = []
    about = tool.get("description") or tool.get("title")
    lines.append(f"# {name}: {_comment(about)}" if about else f"# {name}")
    annotations = tool.get("annotations") or {}
    if isinstance(annotations, Mapping) and annotations.get("readOnlyHint") is True:
        lines += [
            "# CONFIRM: the server annotates it read-only (readOnlyHint), so its calls pass",
            "# without a plan. If a call can change anything, replace this with depends_on.",
            header,
            "ungated = true",
        ]
        return lines
    schema = tool.get("inputSchema") or {}
    props = schema.get("properties") or {}
    required = [p for p in schema.get("required") or [] if p in props]
    keys: list[str] = []
    notes: list[str] = []
    for arg in required:
        spec = props[arg] if isinstance(props[arg], Mapping) else {}
        kinds = _kinds(spec)
        if not _BARE_KEY.fullmatch(arg) or not re.match(r"[A-Za-z_]", arg):
            notes.append(f"{arg} (its name cannot be a placeholder)")
        elif kinds and not kinds <= {"string", "integer"}:
            notes.append(
                f"{arg} (a{'n' if sorted(kinds)[0][0] in 'aeiou' else ''} "
                f"{'/'.join(sorted(kinds))}, not one key segment)"
            )
        elif arg.lower() in _PAYLOAD_NAMES:
            notes.append(f"{arg} (the call's payload)")
        elif "string" in kinds and _is_path(arg, spec, str(about or "")):
            keys.append(f"{server}/{{{arg}:path}}")
        elif kinds == {"integer"}:
            keys.append(f"{server}/{_segment(arg, 'arg')}/{{{arg}}}")
        else:
            keys.append(f"{server}/{_segment(arg, 'arg')}/{{{arg}:enc}}")
    optional = [p for p in props if p not in required]
    if keys:
        lines.append("# CONFIRM: the records its calls depend on, one key per argument that")
        lines.append("# names what a call acts on ({arg:path} takes a path, {arg:enc} any text).")
    else:
        lines.append("# CONFIRM: no argument names what a call acts on, so one fixed key for")
        lines.append("# the tool: name the records its calls depend on instead.")
        keys.append(f"{server}/{_segment(name, 'tool')}")
    if notes:
        lines.append(f"# Left out of the keys: {_comment(', '.join(notes), 120)}.")
    if optional:
        shown = _comment(", ".join(optional), 80)
        lines.append(f"# Optional, so not in a key (a call may leave them out): {shown}.")
    lines.append(header)
    lines.append("depends_on = [" + ", ".join(json.dumps(k) for k in keys) + "]")
    return lines


def scaffold_policy(server: Mapping[str, Any] | None, tools: Sequence[Mapping[str, Any]]) -> str:
    """A commented policy for a server's tools (wire form: name, description, inputSchema,
    annotations), with one entry per tool. It loads with `Policy.from_toml`.

    Raises:
        ValueError: the server listed no tools, or a tool name twice.
    """
    if not tools:
        raise ValueError("the server lists no tools: there is nothing to write a policy for")
    names = [str(t["name"]) for t in tools]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})[0]
        raise ValueError(f"the server lists the tool {twice!r} twice")
    label = str((server or {}).get("name") or "server")
    version = (server or {}).get("version")
    prefix = _segment(label, "server")
    out = [
        f"# planfence policy for the MCP server {label!r}"
        + (f" {version}" if version else "")
        + ", written by `planfence policy init`",
        "# from its tool listing. Every entry is a suggestion: check each line marked CONFIRM,",
        "# then delete the mark. Calls to a tool this file does not declare are blocked.",
        "# Keys: {arg} fills one key segment, {arg:path} a path (an absolute path starts with",
        "# the segment _), {arg:enc} any text as one segment. Each key needs an owner",
        "# (`planfence memory own KEY --owner AGENT`), and a plan that read it.",
    ]
    for tool in tools:
        out.append("")
        out.extend(_entry(prefix, tool))
    text = "\n".join(out) + "\n"
    Policy.from_toml(text, source="<policy init>")  # what is written loads as written
    return text


__all__ = ["scaffold_policy"]
