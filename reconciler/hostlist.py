"""Slurm hostlist expressions: ``gpu[01-04,07]``, ``rack[1-2]-n[1-2]``, ``a,b[3-4]``."""

from __future__ import annotations

import itertools
import re

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def expand(expr: str) -> list[str]:
    expr = expr.strip()
    if not expr or expr in ("(null)", "None"):
        return []
    out: list[str] = []
    for part in _split_top(expr):
        out += _expand_one(part)
    return out


def _split_top(expr: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in expr:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in hostlist {expr!r}")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise ValueError(f"unbalanced '[' in hostlist {expr!r}")
    parts.append("".join(cur))
    return [p for p in parts if p]


def _expand_one(part: str) -> list[str]:
    pieces: list[list[str]] = []
    pos = 0
    for m in re.finditer(r"\[([^\]]*)\]", part):
        pieces.append([part[pos:m.start()]])
        pieces.append(_ranges(m.group(1), part))
        pos = m.end()
    pieces.append([part[pos:]])
    return ["".join(combo) for combo in itertools.product(*pieces)]


def _ranges(body: str, whole: str) -> list[str]:
    out = []
    for r in body.split(","):
        m = _RANGE.match(r.strip())
        if not m:
            raise ValueError(f"bad range {r!r} in hostlist {whole!r}")
        lo, hi = m.group(1), m.group(2) or m.group(1)
        width = len(lo) if lo.startswith("0") or len(lo) == len(hi) else 0
        a, b = int(lo), int(hi)
        if b < a:
            raise ValueError(f"descending range {r!r} in hostlist {whole!r}")
        out += [str(i).zfill(width) for i in range(a, b + 1)]
    return out


def compress(hosts: list[str]) -> str:
    """Plain comma join: srun --nodelist accepts it, and it is unambiguous."""
    return ",".join(hosts)
