"""Client text made safe for one log line: control characters escaped repr-style, length bounded.

A raw request path is percent-decoded, so ``/x%0d%0a...`` carries a real CR LF: written as it is, it
would forge a second log line (``%00`` would make the log binary). Every log message that quotes
client text passes it through :func:`log_text`.
"""

from __future__ import annotations


def _escape(ch: str) -> str:
    return "\\\\" if ch == "\\" else repr(ch)[1:-1]


def log_text(text: str, limit: int = 200) -> str:
    """The first ``limit`` characters of ``text`` with every non-printable character (CR, LF, NUL,
    ESC, DEL, Unicode line separators, ...) and the backslash escaped as ``repr`` writes them
    (``\\r``, ``\\n``, ``\\x00``, ``\\u2028``, ``\\\\``): one line, never ambiguous."""
    text = text[:limit]
    if text.isprintable() and "\\" not in text:  # the usual case: one C-speed scan
        return text
    return "".join(ch if ch.isprintable() and ch != "\\" else _escape(ch) for ch in text)
