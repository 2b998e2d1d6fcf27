"""API keys at the gateway: the file of hashed keys a recipe names (``reconcile.gateway.api_keys``).

The file holds no key, only its SHA-256, one per line, with an optional label::

    # who may call team-a's deployments
    sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 alice
    sha256:60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752 ci

Blank lines and lines starting with ``#`` are skipped. ``reconciler keys hash`` prints the line
for a key read from stdin (never from argv: that is world-readable in ``/proc``); ``reconciler keys
new`` makes a random key and prints both. A request carries the key as ``Authorization: Bearer
<key>``; the gateway's holder compares the SHA-256 of what it presents with the file's, which it
reads again whenever the file changes (its size, mtime or inode): no restart, no reload.

Leaf module (the holder imports it; it imports nothing of the controller).
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = "sha256:"
MAX_BYTES = 4 * 1024 * 1024  # ~40,000 keys: more is not a keys file
MAX_LABEL = 128
MIN_KEY = 16  # a shorter key is guessable; `keys hash` refuses it
_LINE = re.compile(r"sha256:([0-9a-f]{64})(?:[ \t]+(\S.*))?")


class KeysError(ValueError):
    """A keys file that cannot be used, with where (file and line)."""


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def line_for(key: str, label: str | None = None) -> str:
    """The keys-file line of ``key`` (refused: too short, or with whitespace a header cannot carry)."""
    if len(key) < MIN_KEY:
        raise KeysError(f"a key of {len(key)} characters: at least {MIN_KEY} (reconciler keys new makes one)")
    if any(c.isspace() or not c.isprintable() for c in key):
        raise KeysError("a key with whitespace or control characters cannot be sent as 'Authorization: Bearer <key>'")
    if label is not None and (len(label) > MAX_LABEL or "\n" in label or not label.strip()):
        raise KeysError(f"a label is one line of 1 to {MAX_LABEL} characters")
    return PREFIX + digest(key) + (f" {label.strip()}" if label else "")


def new_key() -> str:
    return "sk-" + secrets.token_urlsafe(32)


def parse(text: str, where: str) -> dict[str, str]:
    """digest -> label of every key in the file's ``text``; a bad line is a located error."""
    found: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.fullmatch(line)
        if m is None:
            shown = line[:20] + ("..." if len(line) > 20 else "")
            raise KeysError(f"{where} line {n}: expected 'sha256:<64 lowercase hex digits> [label]', found "
                            f"{shown!r} (reconciler keys hash prints a line)")
        if m[2] is not None and len(m[2]) > MAX_LABEL:
            raise KeysError(f"{where} line {n}: a label longer than {MAX_LABEL} characters")
        found[m[1]] = m[2] or ""
    return found


def read(path: Path) -> dict[str, str]:
    """The keys of the file at ``path`` (KeysError: missing, unreadable, too large, a bad line)."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise KeysError(f"{path}: cannot read the keys file: {e.strerror or e}") from None
    if len(data) > MAX_BYTES:
        raise KeysError(f"{path}: larger than {MAX_BYTES // (1024 * 1024)} MiB: not a keys file")
    try:
        text = data.decode()
    except UnicodeDecodeError as e:
        raise KeysError(f"{path}: not UTF-8 text (byte {e.start})") from None
    return parse(text, str(path))


def _identity(path: Path) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns


@dataclass
class KeyFile:
    """The keys of one file, read again when it changes. A file that cannot be read (missing, a
    bad line) admits nobody (``error`` says why): the gateway fails closed, never open."""

    path: Path
    keys: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    _seen: object = ()  # the identity last read (() never matches: the first check reads)

    def refresh(self) -> None:
        ident = _identity(self.path)
        if ident == self._seen:
            return
        self._seen = ident
        try:
            self.keys, self.error = read(self.path), None
        except KeysError as e:
            self.keys, self.error = {}, str(e)

    def admits(self, authorization: str | None) -> str | None:
        """The label of the key ``authorization`` (``Bearer <key>``) carries, or None: refused."""
        self.refresh()
        if not authorization:
            return None
        scheme, _, key = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            return None
        return self.keys.get(digest(key.strip()))


__all__ = ["KeyFile", "KeysError", "digest", "line_for", "new_key", "parse", "read", "PREFIX"]
