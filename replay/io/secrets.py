"""Secrets never reach a message or a log line Retrace writes: `redact` replaces them in any text (stderr, the alert
log and the alerts themselves, Dagster's logs, the failure log files).

What is a secret: the value of every environment variable named `*_PASSWORD`, `*_SECRET`, `*_TOKEN`,
`*_SECRET_ACCESS_KEY`, `AWS_ACCESS_KEY_ID` and `RETRACE_ALERT_WEBHOOK_URL`; whatever a sink was configured with
(`register`: a webhook URL, an SMTP password, given to a Dagster resource rather than the environment); and, by
their form, a URL's password (`https://user:pw@host`), AWS access key ids and signed-URL parameters. A webhook URL
is a secret in its path and query string (Slack's `/services/T0/B0/<token>`): it is shown as `scheme://host/***`.
"""
from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

MASK = "***"
SECRET_SUFFIXES = ("_PASSWORD", "_SECRET", "_TOKEN", "_SECRET_ACCESS_KEY")
SECRET_NAMES = ("AWS_ACCESS_KEY_ID", "RETRACE_ALERT_WEBHOOK_URL")
SHORTEST = 4  # a shorter value ("1", "yes") is not a secret worth hiding: replacing it would garble every message

_PATTERNS = (
    (re.compile(r"(?<=://)([^/\s:@]+):[^/\s@]+@"), rf"\1:{MASK}@"),  # https://user:password@host
    (re.compile(r"\b(AKIA|ASIA)[A-Z0-9]{16}\b"), rf"\1{MASK}"),  # AWS access key ids
    (re.compile(r"(?i)\b(X-Amz-Signature|X-Amz-Credential|X-Amz-Security-Token|Signature|sig|token|access_token"
                r"|password|secret)=[^&\s\"']+"), rf"\1={MASK}"),  # signed URLs, key=value pairs
)
_registered: set[str] = set()
_guard = threading.Lock()


def is_secret_name(name: str) -> bool:
    upper = name.upper()
    return upper in SECRET_NAMES or upper.endswith(SECRET_SUFFIXES)


def register(*values: str) -> None:
    """Values this process must never show (a sink's URL or password from its configuration, not the
    environment); a URL's path-and-query is registered with it."""
    with _guard:
        for value in values:
            _registered.update(_forms(value))


def secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    """Every secret value known to this process: the environment's secret variables and the registered
    values, each with its URL path-and-query when it is a URL; longest first (a value inside another one is
    replaced after it)."""
    environ = os.environ if environ is None else environ
    found = {form for name, value in environ.items() if is_secret_name(name) for form in _forms(value)}
    with _guard:
        found |= _registered
    return sorted(found, key=lambda s: (-len(s), s))


def redact(text: str, extra: Iterable[str] = (), environ: Mapping[str, str] | None = None) -> str:
    """`text` with every secret (and each of `extra`) replaced: a URL by `scheme://host/***`, any other value
    by `***`."""
    if not text:
        return text
    values = sorted({form for value in extra for form in _forms(value)} | set(secrets(environ)),
                    key=lambda s: (-len(s), s))
    for value in values:
        if value in text:
            text = text.replace(value, redact_url(value) if _is_url(value) else MASK)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def redact_url(url: str) -> str:
    """A URL as it may be shown: its scheme, host and port; the path and query string (a webhook's token), and
    any user and password, hidden."""
    parts = urlsplit(url)
    if not parts.scheme or not parts.hostname:
        return MASK
    port = f":{parts.port}" if parts.port else ""
    hidden = parts.path not in ("", "/") or parts.query or parts.fragment or parts.username
    return f"{parts.scheme}://{parts.hostname}{port}/{MASK if hidden else ''}"


def _is_url(value: str) -> bool:
    return "://" in value and bool(urlsplit(value).hostname)


def _forms(value: str) -> set[str]:
    """A secret value as it may appear in text: whole, and for a URL its path-and-query and its password."""
    value = (value or "").strip()
    if len(value) < SHORTEST:
        return set()
    out = {value}
    if _is_url(value):
        parts = urlsplit(value)
        tail = parts.path + (f"?{parts.query}" if parts.query else "")
        if len(tail) >= SHORTEST and tail != "/":
            out.add(tail)
        if parts.password and len(parts.password) >= SHORTEST:
            out.add(parts.password)
    return out
