"""Renames (a file whose ``name:`` changed): the facts for ``core/plan/rename.py`` read from state/,
and what its steps mean for this pass's manifests. Decided each pass from what is on disk
(``state/renames.json``, ``files.json``, the new deployment's status and gateway record), so a
restarted reconciler carries a rename on where it was."""

from __future__ import annotations

import json
from pathlib import Path

import structlog

from reconciler.core.plan import rename as policy
from reconciler.core.plan.rename import Rename, Step
from reconciler.drivers.state import StateDir
from reconciler.recipe import namespaces
from reconciler.recipe.cluster import Cluster
from reconciler.record_names import BEING_REPLACED, REPLACING
from reconciler.shell.gateway.local import gateway_host
from reconciler.shell.gateway.record import facts as gateway_facts, prefix_of, record_path
from reconciler.shell.gateway.sweep import master_pid
from reconciler.shell.manifests import Manifests, keep_last_applied

log = structlog.get_logger("reconciler")
FILE = "renames.json"


def _valid(d) -> bool:
    return isinstance(d, dict)  # each entry is checked on its own (policy.from_doc): one bad one is set aside


def recorded(state: StateDir, report: bool = False) -> dict[str, Rename]:
    """file path -> the rename recorded for it. An entry that is no rename (a hand's edit: a time
    as text, a step unknown, a name twice) is left out; with ``report``, said as a corrupt state
    (``CorruptState``): the file is written again without it once the pass records its renames."""
    out = {}
    for path, v in state.read_json(state.root / FILE, {}, _valid).items():
        r = policy.from_doc(path, v)
        if isinstance(r, Rename):
            out[path] = r
        elif report and not state.read_only:
            log.warning("corrupt rename record set aside", path=path, error=r)
            state.event("CorruptState", None, f"{FILE}: the rename of {path}: {r}; set aside (what the "
                        "file was applied as is found again from files.json)")
    return out


def write(state: StateDir, m: Manifests) -> None:
    """The renames in progress (``record`` only); no file when there is none."""
    path = state.root / FILE
    doc = {r.path: r.doc() for r in sorted(m.renames.values(), key=lambda r: r.path)}
    if doc:
        state.write_json(path, doc)
    elif path.exists():
        path.unlink()
        state.memo.forget(path)


def _gateway(root: Path, name: str) -> dict:
    try:
        rec = json.loads(record_path(root, name).read_text())
        return rec if isinstance(rec, dict) else {}
    except (OSError, ValueError):
        return {}


def _holdable(state: StateDir, path: str, names: tuple[str, ...]) -> frozenset[str]:
    """The names with a last applied spec of their own to be held on (a sweep's variants are not)."""
    head = f"# expanded from {path}\n"
    return frozenset(n for n in names if namespaces.fits_state(n)
                     and (text := state.last_applied(n)) is not None and not text.startswith(head))


def apply(m: Manifests, state: StateDir, cluster: Cluster | None, now: float, host: str | None = None) -> None:
    """Find the renames of this pass, advance them, and hold each old deployment on its last
    applied spec while its step says so (``m.renames``: new name -> the rename). ``host``: this
    host's name (the gateways' records'); an old gateway elsewhere has no address to hand over.
    One file's rename failing (whatever is on disk) touches no other: it stays where it was."""
    known = state.files()
    records = recorded(state, report=True)
    host = host or gateway_host()
    owners: dict[str, int] = {}  # name -> how many files declare it (once per pass, not per file)
    for ns in m.declared.values():
        for n in ns:
            owners[n] = owners.get(n, 0) + 1
    # a recorded rename whose file is gone for good (deleted) is over: what it declared goes with it
    for path in sorted(m.paths):
        try:
            _apply_one(m, state, cluster, now, host, path, tuple(known.get(path, ())), records.get(path), owners)
        except Exception as e:  # noqa: BLE001 - one file's rename must not stop the pass
            log.exception("rename not advanced", path=path, error=f"{type(e).__name__}: {e}")
            r = records.get(path)
            if r is not None and r.new in m.recipes:  # where it was: the old one serves on
                keep_last_applied(m, state, path, [r.old], True, cluster)
                if r.old in m.recipes:
                    m.renames[r.new] = r


def _apply_one(m: Manifests, state: StateDir, cluster: Cluster | None, now: float, host: str, path: str,
               applied: tuple[str, ...], record: Rename | None, owners: dict[str, int]) -> None:
    # None: not read cleanly this pass (being written, invalid, every name another file's)
    declared = tuple(m.declared[path]) if path in m.declared else None
    # the only names policy.ongoing asks about: the recorded old one, or an applied name no longer
    # declared (none for a file whose names did not change: no state read for it)
    asked = {record.old} if record is not None else {n for n in applied if n not in (declared or ())}
    claimed = frozenset(n for n in asked if owners.get(n, 0) > (n in (declared or ())))
    r = policy.ongoing(path, declared, applied, record, _holdable(state, path, tuple(asked)), claimed, now)
    if r is None:
        return
    if r.new not in m.recipes:
        return  # the new one has no spec this pass (refused, held elsewhere): nothing to rename to
    old_gw, new_gw = _gateway(state.root, r.old), _gateway(state.root, r.new)
    new_status = state.status(r.new) if namespaces.fits_state(r.new) else {}
    new_recipe = m.recipes[r.new]
    took = new_gw.get("takenFrom") == r.old and isinstance(new_gw.get("port"), int)
    up = bool(took and (f := gateway_facts(state.root, r.new)) and f["up"])
    was = r.step
    r = policy.advance(
        r, new_ready=new_status.get("phase") == "Ready",
        new_has_frontend=new_recipe.frontend.type != "none"
        and new_recipe.reconcile.gateway.allocation is None,
        old_endpoint=policy.address_takeable(old_gw, host),
        new_took_endpoint=took, new_serves_endpoint=up,
        old_gateway_runs=master_pid(prefix_of(state.root, r.old)) is not None)
    if not policy.holds_old(r):
        why = policy.why_not_takeable(old_gw, host)
        if was is not r.step and not took and isinstance(old_gw.get("port"), int) and why and not state.read_only:
            state.event("RenameEndpointMoved", r.new, f"{namespaces.display(r.new)} is Ready; the endpoint of "
                        f"{namespaces.display(r.old)} ({old_gw.get('host')}:{old_gw['port']}) cannot be carried "
                        f"over ({why}): {namespaces.display(r.old)} is deleted and the endpoint is the new one's")
        return  # released: from here on the old one is a recipe no file names (a normal delete)
    keep_last_applied(m, state, path, [r.old], True, cluster)
    if r.old in m.recipes:  # else its last applied spec cannot be loaded: no rename, the old one goes
        m.renames[r.new] = r


def old_of(m: Manifests) -> dict[str, Rename]:
    """old name -> the rename that holds it."""
    return {r.old: r for r in m.renames.values() if policy.holds_old(r)}


def reason(m: Manifests, name: str, endpoint: str | None = None) -> tuple[str, str] | None:
    """What ``get``, ``describe`` and the status say of a deployment in a rename (reason, message)."""
    if (r := old_of(m).get(name)) is not None:
        step = ("its gateway's address is being taken over by the new one" if r.step is Step.HANDING_OVER
                else "its gateway stops: the new one serves its address" if r.step is Step.RETIRING
                else f"serving until {namespaces.display(r.new)} is Ready and takes over its endpoint")
        return BEING_REPLACED, (f"renamed to {namespaces.display(r.new)} in {r.path}: {step}; then it is deleted")
    if (r := m.renames.get(name)) is not None:
        at = f" ({endpoint})" if endpoint else ""
        step = ("taking over its endpoint" + at if r.step is Step.HANDING_OVER
                else "serves its endpoint" + at + "; the old one's gateway stops" if r.step is Step.RETIRING
                else "takes over its endpoint" + at + " once Ready")
        return REPLACING, f"replaces {namespaces.display(r.old)} (renamed in {r.path}): {step}"
    return None


def endpoint(m: Manifests, root: Path, name: str) -> str | None:
    """A new deployment waiting to take an old one's endpoint: that endpoint (what clients use)."""
    r = m.renames.get(name)
    if r is None or r.step is not Step.STARTING:
        return None
    f = gateway_facts(root, r.old)
    return f["url"] if f else None


def annotate(st: dict, m: Manifests, root: Path, name: str) -> None:
    """A deployment's status row in a rename: its reason (unless something is wrong with it) and,
    for a new one still starting, the endpoint it is to take over."""
    if (ep := endpoint(m, root, name)) is not None:
        st["endpoint"] = ep
    if st.get("reason") is None and (why := reason(m, name, st.get("endpoint"))) is not None:
        st["reason"], st["reasonMessage"] = why


def record_changes(state: StateDir, m: Manifests) -> None:
    """Events for renames begun, handed over, finished or given up; then ``state/renames.json``."""
    before = recorded(state)
    now_ = {r.path: r for r in m.renames.values()}
    for path, r in now_.items():
        was = before.get(path)
        if was is None or was.new != r.new:
            state.event("Renaming", r.new, f"{path} now names {namespaces.display(r.new)} (was "
                        f"{namespaces.display(r.old)}): {namespaces.display(r.old)} serves until "
                        f"{namespaces.display(r.new)} is Ready and takes over its endpoint")
        elif was.step is not r.step and r.step is Step.HANDING_OVER:
            state.event("RenameHandOver", r.new, f"{namespaces.display(r.new)} is Ready: its gateway takes "
                        f"over the endpoint of {namespaces.display(r.old)}")
    for path, was in before.items():
        r = now_.get(path)
        if r is not None and r.new == was.new:
            continue
        if r is None and was.new in m.recipes and was.old not in m.recipes:
            state.event("Renamed", was.new, f"{namespaces.display(was.new)} serves the endpoint of "
                        f"{namespaces.display(was.old)} (renamed in {path}); {namespaces.display(was.old)} is deleted")
        elif r is None or r.new != was.new:
            state.event("RenameAbandoned", was.new, f"{path} no longer names {namespaces.display(was.new)}: "
                        "it is deleted" + (f"; {namespaces.display(was.old)} keeps its endpoint"
                                           if was.old in m.recipes else ""))
    write(state, m)
