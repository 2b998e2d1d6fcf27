"""What keeps a gateway's nginx inside the reconciler's own rights: its workers' user, and no
symlink where it writes.

nginx's master may run as root (a reconciler run as root starts it): by default its workers then
run as ``nobody``, which cannot traverse a state directory at 0700, so a request body past the
1 MB buffer (spooled under ``tmp/body``) got 500 (Permission denied). The master itself opens its
log and pid file as root, following a symlink planted there (it appended to the target).
"""

from __future__ import annotations

import os
from pathlib import Path

from reconciler.fsutil import LinkRefused, private_dirs

NGINX_TEMPS = ("body", "proxy", "fastcgi", "uwsgi", "scgi")  # gateway/__init__.py's *_temp_path


def nginx_user() -> str | None:
    """Who nginx's workers run as: the reconciler's own user and group when its master starts as
    root (nginx's default, nobody, cannot reach a state directory at 0700); None otherwise (the
    workers are the master's user already, and nginx would only warn)."""
    if os.geteuid() != 0:
        return None
    import grp
    import pwd

    return f"{pwd.getpwuid(os.geteuid()).pw_name} {grp.getgrgid(os.getegid()).gr_name}"


def unsafe_prefix(prefix: Path, root: Path) -> str | None:
    """Why nginx must not be started or reloaded in ``prefix`` now: a symlink where it writes
    (its master may be root: it would append its log, write its pid or spool bodies through it)."""
    try:
        for d in NGINX_TEMPS:
            private_dirs(prefix / "tmp" / d, root)
        for f in ("error.log", "nginx.pid"):
            if (prefix / f).is_symlink():
                raise LinkRefused(f"{prefix / f} is a symbolic link: nginx would write through it; refused "
                                  "(remove it; state/ is the reconciler's alone)")
    except OSError as e:
        return str(e)
    return None
