"""Redaction of secrets before anything is saved or put in a prompt."""

from __future__ import annotations

import re

_PATTERNS = [
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S),
    re.compile(r"\bhf_[A-Za-z0-9]{20,}"),
    re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"),
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
    re.compile(r"\bxox[baprs]-[A-Za-z0-9\-]{10,}"),
    re.compile(r"(?i)(authorization:\s*(?:bearer|basic)\s+)\S+"),
    re.compile(r"(?i)\b((?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key)\s*[:=]\s*)(['\"]?)[^\s'\"]+\2"),
]
REDACTED = "[REDACTED]"


def redact(text: str) -> str:
    """``text`` with tokens, keys and passwords replaced by ``[REDACTED]`` (keeping the key names)."""
    for p in _PATTERNS:
        text = p.sub(lambda m: (m.group(1) if m.re.groups and m.group(1) else "") + REDACTED, text)
    return text
