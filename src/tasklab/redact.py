"""Keeping database passwords out of everything tasklab prints.

A PostgreSQL URL may carry a password (`postgresql://user:secret@host/db`) and a
driver's message may quote a conninfo (`password=secret`). Every line tasklab writes
for people — CLI errors, log lines, the `ready` line, metric labels — goes through
`redact` first.
"""

from __future__ import annotations

import re

_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)[^@\s]*@")
_CONNINFO_PASSWORD = re.compile(r"(?i)\b(password\s*=\s*)('[^']*'|\S+)")


def redact(text: str) -> str:
    """`text` with every URL password and conninfo password replaced by `***`."""
    text = _URL_PASSWORD.sub(lambda m: m.group("head") + "***@", text)
    return _CONNINFO_PASSWORD.sub(lambda m: m.group(1) + "***", text)
