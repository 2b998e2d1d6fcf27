"""Why a unit is down, in kubectl's words: ConfigError, CrashLoopBackOff, Error, Killed, FatalLogLine, Unhealthy...

A unit whose last life failed gets a ``reason`` (one word, for a REASON column) and a ``message``
(the exit, the reconciler's own reason for stopping it, and the first fatal line of that life's
log) on its status row. Read from state/ only: the launcher's exit records, launches.json and
the logs; a log is scanned once per (size, mtime), whoever asks.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

from reconciler.core.refusal import WORD
from reconciler.drivers.base import step_log_paths
from reconciler.shell.refused import log_refusal, unit_refusal
from reconciler.world import life_name
from reconciler.logpattern import compile_pattern

# what says "this is why it died" when the backend names no pattern of its own
GENERIC_FATAL = re.compile(r"(?i)(\w*(error|exception)\b|\bfatal\b|\bpanic(ked)?\b|segmentation fault|out of memory)")
SCAN_BYTES = 1 << 20  # the first MiB of a life's log: a crash at start is near its top
STOP_WORDS = {  # StopReason values (launches.json stoppedFor) -> the word
    "fatal log line": "FatalLogLine",
    "liveness probes failed": "Unhealthy",
    "not Ready within the startup grace": "StartupTimeout",
    "a rank died: relaunching the whole worker": "RankLost",
}
_cache: dict[tuple[str, int, float, tuple[str, ...]], str | None] = {}


def exit_word(code: int) -> str:
    """kubectl's words for how a process ended (128+n: killed by signal n)."""
    if code == 0:
        return "Completed"
    if code > 128:
        sig = code - 128
        return {signal.SIGKILL: "Killed", signal.SIGTERM: "Terminated", signal.SIGSEGV: "Segfault",
                signal.SIGABRT: "Aborted", signal.SIGINT: "Interrupted"}.get(sig, f"Signal{sig}")
    return "Error"


def first_fatal_line(path: Path, patterns: tuple[str, ...]) -> str | None:
    """The first line of the log matching the unit's fatal patterns, else a generic error word."""
    try:
        st = path.stat()
    except OSError:
        return None
    key = (str(path), st.st_size, st.st_mtime, patterns)
    if key in _cache:
        return _cache[key]
    try:
        with path.open("rb") as f:
            text = f.read(SCAN_BYTES).decode(errors="replace")
    except OSError:
        return None
    compiled = [compile_pattern(p) for p in patterns]  # RE2: linear in the line, as the tick's scan
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    found = next((ln for ln in lines if any(p.search(ln) for p in compiled)), None) \
        or next((ln for ln in lines if GENERIC_FATAL.search(ln) and not ln.startswith("Traceback")), None)
    if len(_cache) > 512:
        _cache.clear()
    _cache[key] = found[:300] if found else None
    return _cache[key]


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return -1.0


def failed_life_log(state: Path, recipe: str, unit: str, running: bool,
                    launched_at: float | None = None, slot: int | None = None) -> Path | None:
    """The log of the unit's last ended life. That life's slot is the one with the newest exit
    record. A life launched after it (``running``, or ``launched_at``, the launch record's time, is
    later: squeue may not list its step yet) in the same slot (``slot``, the last launch's) moved
    the failed life's log to ``.1`` at launch; its own log may not exist yet, so the choice is by
    slot, not by which files exist. Without a slot record: the newest log, else the one before."""
    paths = [step_log_paths(state, recipe, life_name(unit, s), 0) for s in (0, 1)]
    ended = [_mtime(s.status) for s in paths]
    last = max((0, 1), key=lambda s: ended[s])
    newer = running or (launched_at is not None and ended[last] >= 0 and launched_at > ended[last])
    if slot in (0, 1) and ended[last] >= 0:
        log = paths[last].log
        if newer and slot == last:
            log = log.with_name(log.name + ".1")
        return log if log.exists() else None
    cands = [p for s in paths for p in (s.log, s.log.with_name(s.log.name + ".1")) if p.exists()]
    cands.sort(key=_mtime, reverse=True)
    if newer:
        cands = cands[1:]
    return cands[0] if cands else None


def unit_reason(row: dict, launch: dict, state: Path, recipe: str, patterns: tuple[str, ...]) -> tuple[str, str] | None:
    """(reason, message) for a unit row whose last life failed and that is not Ready now; else None."""
    if row.get("ready"):
        return None
    ex = row.get("lastExit")
    stopped = launch.get("stoppedFor") or launch.get("lastStoppedFor")
    stop_word = STOP_WORDS.get(stopped or "")
    down = row["phase"] in ("BackOff", "Failed")  # the plan holds it back after a failure
    if not down and not ((ex and ex["code"] != 0 and row.get("restarts")) or stop_word):
        return None
    log = failed_life_log(state, recipe, row["name"], bool(row.get("steps")), launch.get("lastLaunch"),
                          launch.get("slot"))
    # the recipe's or the cluster config's to fix, whatever the backoff: srun's words, or the engine's
    srun_said = None if row.get("steps") else unit_refusal(state, recipe, row["name"], launch.get("slot"), None)
    engine_said = None if srun_said or log is None else log_refusal(log)
    if srun_said or engine_said:
        said = [srun_said] if srun_said else [f"exited {ex['code']} at {ex['at']}"] * bool(ex) + [f"log: {engine_said}"]
        return WORD, "; ".join(said) + " (refused for the recipe's or the cluster config's own reason, not the node's)"
    if row["phase"] == "BackOff":
        word = "CrashLoopBackOff"
    elif stop_word:
        word = stop_word
    elif ex:
        word = exit_word(ex["code"])
    else:
        word = "Error"
    parts = []
    if ex:
        parts.append(f"exited {ex['code']}" + (f" ({exit_word(ex['code'])})" if ex["code"] > 128 else "")
                     + f" at {ex['at']}")
    if stopped and stop_word:
        parts.append(f"stopped: {stopped}")
    if not ex and not stop_word:
        parts.append("ended without an exit status (cancelled outside the reconciler, or its node went away)")
    if row["phase"] == "Failed":
        parts.append("not restarted (restart policy)")
    line = first_fatal_line(log, patterns) if log else None
    if line is None and log is not None and not log.name.endswith(".1") and log.with_name(log.name + ".1").exists():
        # the exit record can land before slurmstepd has written the life's last output: the life
        # before it (same slot) failed alike, and its log is complete
        line = first_fatal_line(log.with_name(log.name + ".1"), patterns)
    if line:
        parts.append(f"log: {line}")
    return word, "; ".join(parts) or word


def annotate(rows: list[dict], d, state: Path, recipe: str, launches: dict[str, dict]) -> None:
    """Add ``reason`` / ``message`` to every unit row (None when nothing failed)."""
    patterns = {u.name: tuple(u.fatal_patterns) for u in d.all_units} if d is not None else {}
    for row in rows:
        got = unit_reason(row, launches.get(row["name"], {}), state, recipe, patterns.get(row["name"], ()))
        row["reason"], row["message"] = got if got else (None, None)


def keep_refusal(rows: list[dict], prev_rows: list[dict]) -> None:
    """A unit refused for the recipe's or the config's own reason is relaunched (after its backoff)
    with the same spec, which will be refused again: while that life is launching it has no exit
    of its own yet, and its row would say nothing — `get` flickered between ConfigError and "-"
    at every relaunch. Keep the refusal until the life is Ready or the spec changes."""
    before = {r.get("name"): r for r in prev_rows if isinstance(r, dict)}
    for row in rows:
        old = before.get(row["name"])
        if (row.get("reason") is None and not row.get("ready") and row.get("steps") and old is not None
                and old.get("reason") == WORD and old.get("specHash") == row.get("specHash")):
            row["reason"], row["message"] = WORD, old.get("message")


# the Ready condition's reasons that no worker row carries: the deployment's own path to a client
PATH_REASONS = ("GatewayDown", "GatewayNotRouting", "FrontendNotAnswering")


def deployment_reason(st: dict) -> tuple[str | None, str | None]:
    """get's REASON for a recipe's status: a refused rollout (it comes first), else the first failing
    worker's, else what keeps its endpoint from answering (the gateway down or routing nowhere, the
    frontends failing their canary) once every worker is Ready: ``describe`` had it, ``get`` showed
    "-". While a worker is starting that is why, and the frontends' canary fails for it too."""
    c = next((c for c in st["conditions"] if c["reason"] == "RolloutFailed"), None)
    if c is not None:
        return c["reason"], c["message"]
    reason, why = recipe_reason(st["workers"])
    if reason is None and all(r.get("ready") for r in st["workers"] if r["role"] != "frontend"):
        c = next((c for c in st["conditions"] if c["type"] == "Ready" and c["status"] == "False"
                  and c["reason"] in PATH_REASONS), None)
        if c is not None:
            return c["reason"], c["message"]
    return reason, why


def recipe_reason(rows: list[dict]) -> tuple[str | None, str | None]:
    """The deployment's REASON: its first failing worker's, else a service's or the frontend's."""
    order = sorted(rows, key=lambda r: (r["role"].startswith("svc-") or r["role"] == "frontend",))
    for r in order:
        if r.get("reason"):
            return r["reason"], f"{r['name']}: {r['message']}"
    return None, None
