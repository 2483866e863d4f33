"""Store URLs in messages: the password never leaves in an error, a log line or a repr.

`redact_url` works on text, not on a parsed URL, so that it also hides the password of a URL
that does not parse (a mistyped scheme, a broken IPv6 host), which is exactly when it is shown.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

MASK = "***"

# Query parameters (`?password=...`) and libpq `key=value` pairs that carry a secret.
_SECRET_PARAM = re.compile(
    r"(?i)(?<![A-Za-z0-9_])(password|passwd|pwd|sslpassword|sslkey_password|secret|token)"
    r"(\s*=\s*)('(?:[^'\\]|\\.)*'?|[^&\s#]*)"
)


def _userinfo_span(url: str) -> tuple[int, int] | None:
    """Where the `user:password` part of `scheme://user:password@host/...` sits, or None.

    A mistyped password may hold unescaped '/', '?', '#' or '@', so the user information is
    taken to end at the last '@' of the URL: in doubt, more is hidden rather than less.
    """
    start = url.find("//")
    at = url.rfind("@")
    if start < 0 or at < start:
        return None
    return start + 2, at


def redact_url(url: str) -> str:
    """`url` with its password replaced by `***`, safe to show in errors, logs and reprs.

    Hides the password of `user:password@` and of query or key=value parameters such as
    `password=`, and works on malformed URLs too; a URL without a password is unchanged.
    """
    text = str(url)
    span = _userinfo_span(text)
    if span is not None:
        start, at = span
        user, colon, _ = text[start:at].partition(":")
        if colon:
            text = f"{text[:start]}{user}:{MASK}{text[at:]}"
    return _SECRET_PARAM.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)


def url_secrets(url: str) -> list[str]:
    """The secrets `redact_url` hides, as written and percent-decoded (longest first), so that
    a message from a driver that echoes one of them can be scrubbed with `scrub`."""
    found: set[str] = set()
    span = _userinfo_span(url)
    if span is not None:
        start, at = span
        _, colon, password = url[start:at].partition(":")
        if colon and password:
            found.add(password)
    for m in _SECRET_PARAM.finditer(url):
        value = m.group(3).strip("'")
        if value:
            found.add(value)
    found |= {unquote(s) for s in found}
    return sorted((s for s in found if s), key=len, reverse=True)


def scrub(text: str, url: str) -> str:
    """`text` (e.g. a driver's error message about `url`) with `url`'s secrets masked."""
    text = str(text)
    for secret in url_secrets(url):
        if len(secret) >= 6:
            text = text.replace(secret, MASK)
        else:  # a short secret only where it stands alone, or every "a" would turn into ***
            text = re.sub(rf"(?<![A-Za-z0-9]){re.escape(secret)}(?![A-Za-z0-9])", MASK, text)
    return _SECRET_PARAM.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)


def url_flag(name: str, text: str) -> bool:
    """The yes/no value of the `name=` option of a store URL (1/0, true/false, yes/no, on/off).

    Raises:
        ConfigError: any other value.
    """
    from .errors import ConfigError

    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name} must be 1 or 0 (true or false) in the store URL, not {text!r}")
