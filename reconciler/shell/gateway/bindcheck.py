"""Whether a TCP port can be bound on this host now (the gateway's and its holder's ports)."""

from __future__ import annotations

import socket


def bind_free(port: int, addr: str = "0.0.0.0") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((addr, port))
        except OSError:
            return False
    return True
