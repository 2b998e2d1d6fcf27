"""Who may read the reconciler's own pages (the status page, ``/metrics``): a ``Host:`` that names
this host, and a token when ``run --http-token-file`` gives one.

DNS rebinding: a web page on an attacker's name (``evil.example``) makes that name resolve to
127.0.0.1 and reads ``http://evil.example:PORT/api/status`` as its own origin: the browser sends
``Host: evil.example``. So a request is answered only when its ``Host:`` is an IP literal (a
browser that asked for an IP address is same-origin with that address only, not with any page),
``localhost``, this host's names, or the address the server is bound to; anything else is 421.

Imports nothing of the reconciler: the status page (ui) and the metrics server (shell) share it.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import re
import socket
from http.cookies import SimpleCookie
from pathlib import Path
from urllib.parse import parse_qs

COOKIE = "reconciler_token"
MAX_TOKEN = 4096


def _bare(host: str) -> str:
    """``Host:`` without its port, lowercased; ``[::1]:8080`` -> ``::1``."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def own_names(bind: str) -> set[str]:
    names = {"localhost", socket.gethostname().lower(), socket.getfqdn().lower(), _bare(bind)}
    return {n for n in names if n}


def host_allowed(host: str | None, names: set[str]) -> bool:
    """Whether a request with this ``Host:`` may be answered (``names``: ``own_names``)."""
    if not host:
        return False  # HTTP/1.1 requires it; a browser always sends one
    bare = _bare(host)
    try:
        ipaddress.ip_address(bare)
        return True
    except ValueError:
        return bare.rstrip(".") in names


def read_token(path: str) -> str:
    """The token of ``--http-token-file`` (its first line); ValueError says what is wrong."""
    p = Path(path)
    try:
        st = p.stat()
        text = p.read_text()[: MAX_TOKEN + 1]
    except OSError as e:
        raise ValueError(f"{path}: cannot read the token file: {e.strerror or e}") from None
    token = (text.splitlines() or [""])[0].strip()
    # URL- and cookie-safe, so that ?token= and the cookie carry it unchanged
    if not re.fullmatch(r"[A-Za-z0-9._~-]{16,%d}" % MAX_TOKEN, token):
        raise ValueError(f"{path}: expected one token of 16 to {MAX_TOKEN} characters A-Z a-z 0-9 . _ ~ - on its "
                         f"first line (python -c 'import secrets; print(secrets.token_urlsafe(32))')")
    if st.st_mode & 0o077 and os.geteuid() == st.st_uid:
        raise ValueError(f"{path}: readable by others (mode {st.st_mode & 0o777:o}): chmod 600 it")
    return token


def presented(headers, query: str) -> tuple[str | None, bool]:
    """The token a request carries (``Authorization: Bearer``, the cookie, or ``?token=``) and
    whether it came in the query (then the page sets the cookie, so the page's own fetches carry it)."""
    auth = headers.get("Authorization") or ""
    scheme, _, value = auth.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip(), False
    jar = SimpleCookie()
    try:
        jar.load(headers.get("Cookie") or "")
    except Exception:  # noqa: BLE001 - a malformed cookie is no token
        jar = SimpleCookie()
    if COOKIE in jar:
        return jar[COOKIE].value, False
    q = parse_qs(query).get("token")
    return (q[0], True) if q else (None, False)


def token_ok(given: str | None, token: str | None) -> bool:
    if token is None:
        return True
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


def set_cookie(token: str) -> str:
    return f"{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/"
