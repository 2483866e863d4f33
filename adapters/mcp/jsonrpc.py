"""JSON-RPC as the proxy reads it: just enough of each message to route it.

A message is decoded once (`json.loads`) and looked at for its shape (request, notification,
response), its id and method, and for a few methods its params; the bytes it came in are what is
forwarded when nothing in it changes. Nothing here is validated against the MCP schema: the
proxy's peers do that. What the proxy does check is what it needs to route safely, and a message
that fails those checks is answered by the proxy, never forwarded:

- not JSON: `PARSE_ERROR`, id null;
- not a JSON-RPC 2.0 object (or an empty batch, or a request id that is neither a string nor an
  integer): `INVALID_REQUEST`.

The methods of both protocol eras are listed here by what the proxy does with them (`CLIENT`).
A client method that is not listed is refused (`METHOD_NOT_FOUND`): a protocol revision cannot
open a path to the upstream's tools around the gate.
"""

from __future__ import annotations

import json
from typing import Any, Final

JSONRPC = "2.0"

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
CONNECTION_CLOSED: Final = -32000
REQUEST_TIMEOUT: Final = -32001
HEADER_MISMATCH: Final = -32020
UNSUPPORTED_PROTOCOL_VERSION: Final = -32022

HANDSHAKE_VERSIONS: Final = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MODERN_VERSIONS: Final = ("2026-07-28",)
LATEST_HANDSHAKE: Final = HANDSHAKE_VERSIONS[-1]
LATEST_MODERN: Final = MODERN_VERSIONS[-1]

# The 2026-07-28 per-request envelope, in `params._meta`.
PROTOCOL_VERSION: Final = "io.modelcontextprotocol/protocolVersion"
CLIENT_INFO: Final = "io.modelcontextprotocol/clientInfo"
CLIENT_CAPABILITIES: Final = "io.modelcontextprotocol/clientCapabilities"
LOG_LEVEL: Final = "io.modelcontextprotocol/logLevel"
SERVER_INFO: Final = "io.modelcontextprotocol/serverInfo"
SUBSCRIPTION_ID: Final = "io.modelcontextprotocol/subscriptionId"
ENVELOPE_PREFIX: Final = "io.modelcontextprotocol/"

# What the proxy does with each method a client may send (both eras):
GATED: Final = "gated"  # may run a tool: judged by the gate first
FORWARD: Final = "forward"  # harmless: forwarded as it came
LOCAL: Final = "local"  # answered by the proxy itself (handshake, connection state)
CLIENT: Final[dict[str, str]] = {
    "tools/call": GATED,
    "tools/list": FORWARD,  # edited on the way back for the proxy's own tools
    "resources/list": FORWARD,
    "resources/templates/list": FORWARD,
    "resources/read": FORWARD,
    "prompts/list": FORWARD,
    "prompts/get": FORWARD,
    "completion/complete": FORWARD,
    "ping": FORWARD,
    # A task-augmented `tools/call` is gated like any other; these only read or end a task.
    "tasks/get": FORWARD,
    "tasks/result": FORWARD,
    "tasks/list": FORWARD,
    "tasks/cancel": FORWARD,
    "initialize": LOCAL,
    "server/discover": LOCAL,
    "logging/setLevel": LOCAL,
    "resources/subscribe": LOCAL,
    "resources/unsubscribe": LOCAL,
    "subscriptions/listen": LOCAL,
}
# Notifications a client may send that the proxy passes on or acts on; any other is dropped.
CLIENT_NOTIFICATIONS: Final = frozenset(
    {
        "notifications/initialized",
        "notifications/cancelled",
        "notifications/progress",
        "notifications/roots/list_changed",
        "notifications/tasks/status",
    }
)
# Methods whose 2026-era result may be `input_required` (the client is asked, then retries).
INPUT_REQUIRED: Final = frozenset({"tools/call", "prompts/get", "resources/read"})
# Methods whose 2026-era results carry freshness hints (`ttlMs`, `cacheScope`).
CACHEABLE: Final = frozenset(
    {
        "tools/list",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "prompts/list",
        "server/discover",
    }
)
# What a 2026-era result has that a handshake-era one does not.
MODERN_RESULT_FIELDS: Final = ("resultType", "ttlMs", "cacheScope")


class Malformed(Exception):
    """A message the proxy answers with an error instead of routing it."""

    def __init__(self, code: int, message: str, msg_id: Any = None) -> None:
        self.code = code
        self.msg_id = msg_id
        super().__init__(message)

    def reply(self) -> dict[str, Any]:
        return error(self.msg_id, self.code, str(self))


def decode(data: bytes | str) -> Any:
    """The JSON value of one message (or batch).

    Raises:
        Malformed: not JSON.
    """
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        raise Malformed(PARSE_ERROR, "Parse error") from None


_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def encode(message: Any) -> bytes:
    """One message, compact, on one line (no newline inside)."""
    text = _COMPACT.encode(message)
    try:
        return text.encode()
    except UnicodeEncodeError:  # a lone surrogate (from a `\\ud800` escape): keep it escaped
        return json.dumps(message, separators=(",", ":")).encode()


def valid_id(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, str)


def check(message: Any) -> str:
    """The kind of one decoded message: "request", "notification" or "response".

    Raises:
        Malformed: not a JSON-RPC 2.0 message the proxy can route.
    """
    if not isinstance(message, dict) or message.get("jsonrpc") != JSONRPC:
        raise Malformed(INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 message")
    method = message.get("method")
    if method is not None:
        params = message.get("params")
        msg_id = message.get("id")
        if not isinstance(method, str) or (params is not None and not isinstance(params, dict)):
            bad = msg_id if valid_id(msg_id) else None
            raise Malformed(INVALID_REQUEST, "Invalid Request: bad method or params", bad)
        if "id" not in message:
            return "notification"
        if not valid_id(msg_id):
            raise Malformed(INVALID_REQUEST, "Invalid Request: the id is not a string or integer")
        return "request"
    if "id" in message and ("result" in message or "error" in message):
        return "response"
    raise Malformed(INVALID_REQUEST, "Invalid Request: neither a request nor a response")


def params_of(message: dict[str, Any]) -> dict[str, Any]:
    params = message.get("params")
    return params if isinstance(params, dict) else {}


def meta_of(params: dict[str, Any]) -> dict[str, Any]:
    meta = params.get("_meta")
    return meta if isinstance(meta, dict) else {}


def is_modern(message: dict[str, Any]) -> bool:
    """Whether a request speaks the 2026-07-28 protocol (its envelope says so)."""
    params = message.get("params")
    if not isinstance(params, dict):
        return False
    meta = params.get("_meta")
    return isinstance(meta, dict) and meta.get(PROTOCOL_VERSION) in MODERN_VERSIONS


def error(msg_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        body["data"] = data
    return {"jsonrpc": JSONRPC, "id": msg_id, "error": body}


def result(msg_id: Any, value: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": JSONRPC, "id": msg_id, "result": value}


def notification(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"jsonrpc": JSONRPC, "method": method}
    if params is not None:
        out["params"] = params
    return out


def request(msg_id: Any, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"jsonrpc": JSONRPC, "id": msg_id, "method": method}
    if params is not None:
        out["params"] = params
    return out


LEVELS: Final = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


def levels_from(level: Any) -> frozenset[str]:
    """The log levels at or above `level` (every level for one the proxy does not know)."""
    if level not in LEVELS:
        return frozenset(LEVELS)
    return frozenset(LEVELS[LEVELS.index(level) :])


__all__ = [
    "CLIENT",
    "FORWARD",
    "GATED",
    "LOCAL",
    "Malformed",
    "check",
    "decode",
    "encode",
    "error",
    "is_modern",
    "result",
]
