"""A listening socket that a successor router can share, so a router is replaced with no gap.

Both lives bind the port with SO_REUSEPORT. The newer one attaches a classic BPF program to
the port's reuseport group that picks the group's second socket — itself, while the old one
is still there — so every new connection goes to the new router and the old one only
finishes what it has; once the old one has closed, the program's index is past the group's
end and the kernel falls back to its hash over the one socket left. No sysctl, no privilege.
"""

from __future__ import annotations

import ctypes
import errno
import socket
import time

SO_ATTACH_REUSEPORT_CBPF = 51  # <asm-generic/socket.h>
BPF_RET_K = 0x06  # BPF_RET | BPF_K: return the constant k


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def steer_to_newest(sock: socket.socket) -> bool:
    """Send the group's new connections to its second socket (this one, beside a predecessor)."""
    prog = (_SockFilter * 1)(_SockFilter(BPF_RET_K, 0, 0, 1))
    fprog = _SockFprog(1, ctypes.cast(prog, ctypes.POINTER(_SockFilter)))
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, bytes(fprog))  # the kernel copies the program
    except OSError:
        return False  # an old kernel: both routers share the new connections until the old one leaves
    return True


def shared_listener(host: str, port: int, wait: float = 20.0, backlog: int = 1024) -> socket.socket:
    """Bind ``host:port`` shareably and listen. A predecessor that holds the port without sharing
    it (a router of an older version) is waited for, up to ``wait`` seconds."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    deadline = time.monotonic() + wait
    while True:
        try:
            sock.bind((host, port))
            break
        except OSError as e:
            if e.errno != errno.EADDRINUSE or time.monotonic() >= deadline:
                sock.close()
                raise
            time.sleep(0.2)
    sock.listen(backlog)
    steer_to_newest(sock)
    return sock
