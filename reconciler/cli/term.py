"""What reaches a terminal is text, never a command to it.

A file name, a recipe's value or a line a process logged may carry escape sequences: an OSC sets
the terminal's title or writes its clipboard (OSC 52), a CSI clears the screen or moves the cursor
over the lines above, a bidirectional override reorders what is read. `get`, `describe` and the
errors every command prints show such characters escaped (``\\x1b``), as Python's repr would; the
reconciler's own colours are added after, to text already made safe.
"""

from __future__ import annotations

import re
from typing import Any

# C0 controls but newline and tab, DEL, C1 controls (0x9b is a one-byte CSI), and the Unicode
# bidirectional embeddings, overrides and isolates
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escaped(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def shown(text: str) -> str:
    """``text`` with every character that would steer a terminal escaped."""
    return _UNSAFE.sub(_escaped, text)


def clean(value: Any) -> Any:
    """Every string in a document (dicts, lists, tuples; keys too) made safe to print."""
    if isinstance(value, str):
        return shown(value)
    if isinstance(value, dict):
        return {clean(k): clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(clean(v) for v in value)
    return value
