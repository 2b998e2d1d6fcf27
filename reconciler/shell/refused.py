"""A launch or a life the cluster refused for the recipe's own reason (a ConfigError), read from state/.

Two places say so (the words: ``core/refusal.py``): the srun client's output of a launch
(``<life>.<rank>.srun``: srun refuses an option, a partition, a feature; pyxis an image), and the
head of a life's log (the engine refuses a flag and exits at once). The srun file keeps every
launch's output, each after a header line the driver writes (``HEADER``, with the spec hash
launched), so the output of one spec's launches is told from an older spec's.
"""

from __future__ import annotations

import os
from pathlib import Path

from reconciler.core.refusal import LAUNCH_HEADER as HEADER, refusal
from reconciler.drivers.base import step_log_paths
from reconciler.world import life_name

READ_BYTES = 64 << 10  # the end of a srun file (its last launches), the head of a log
_cache: dict[tuple[str, int, int, str, bool], str | None] = {}


def launch_sections(text: str) -> list[tuple[str, str]]:
    """(spec hash, what srun printed) per launch, oldest first; output before any header: spec ''."""
    out: list[tuple[str, list[str]]] = [("", [])]
    for line in text.splitlines():
        if line.startswith(HEADER):
            out.append((line[len(HEADER):].split(" ", 1)[0], []))
        else:
            out[-1][1].append(line)
    return [(spec, "\n".join(lines).strip()) for spec, lines in out if spec or lines]


def last_output(text: str, spec: str | None = None) -> str:
    """What srun printed for the last launch in ``text`` (a srun file's end); with ``spec``, for the
    last launch of that spec that printed anything (a refusal is the same at each launch of a spec,
    and the launch after it may have printed nothing yet)."""
    sections = launch_sections(text)
    if spec is None:
        return sections[-1][1] if sections else ""
    return next((t for s, t in reversed(sections) if s == spec and t), "")


def launch_said(path: Path, spec: str, limit: int = 400) -> str:
    """The end of what srun printed for the last launch of ``spec`` (a LaunchFailed's words)."""
    text = last_output(_tail(path), spec) or last_output(_tail(path))
    return text[-limit:]


def srun_refusal(path: Path, spec: str | None = None) -> str | None:
    """The refusal line in the srun output of the last launch (of ``spec``, when given)."""
    return _cached(path, spec or "", False, lambda text: refusal(last_output(text, spec)))


def log_refusal(path: Path) -> str | None:
    """The refusal line at the head of a life's log (an engine that refused a flag), else None."""
    return _cached(path, "", True, refusal)


def launch_refusal(state: Path, step) -> str | None:
    """A launch that failed (``step``: its pseudo step): did srun refuse it for the recipe's reason?"""
    return srun_refusal(step_log_paths(state, step.recipe, step.life, step.rank).srun, step.spec_hash)


def relaunched_refusal(state: Path, recipe: str, unit: str, slot: int, spec: str) -> str | None:
    """A unit relaunched in place this tick: did its life before (rotated to ``.1`` by that launch)
    end on a refusal? Its srun output says so for srun; its log's head for an engine."""
    paths = step_log_paths(state, recipe, life_name(unit, slot), 0)
    return log_refusal(paths.log.with_name(paths.log.name + ".1")) or srun_refusal(paths.srun, spec)


def unit_refusal(state: Path, recipe: str, unit: str, slot: int | None, log: Path | None) -> str | None:
    """For get / describe: a unit that is down because its last launch or life was refused."""
    paths = step_log_paths(state, recipe, life_name(unit, slot or 0), 0)
    return srun_refusal(paths.srun) or (log_refusal(log) if log is not None else None)


def _tail(path: Path, head: bool = False) -> str:
    try:
        with path.open("rb") as f:
            if not head:
                size = f.seek(0, os.SEEK_END)
                f.seek(max(0, size - READ_BYTES))
            return f.read(READ_BYTES).decode(errors="replace")
    except OSError:
        return ""


def _cached(path: Path, spec: str, head: bool, judge) -> str | None:
    try:
        st = path.stat()
    except OSError:
        return None
    key = (str(path), st.st_size, st.st_mtime_ns, spec, head)
    if key not in _cache:
        if len(_cache) > 1024:
            _cache.clear()
        _cache[key] = judge(_tail(path, head))
    return _cache[key]
