"""After a tick: status, conditions and events, last-applied specs, endpoints and the port registry.

Only ``Controller.tick`` calls this; ``get`` and ``plan`` build the same status in memory
and write nothing.
"""

from __future__ import annotations

import structlog

from reconciler.drivers.base import step_log_paths
from reconciler.recipe import namespaces
from reconciler.core.refusal import WORD
from reconciler.shell import describe_facts, refused
from reconciler.shell.snapshot import Snapshot
from reconciler.drivers.state import StateDir, set_suspended, suspended_names
from reconciler.shell.status import build_status
from reconciler.timefmt import iso
from reconciler.shell import prune_guard, reasons, renames
from reconciler.shell.readiness import router_sync
from reconciler.shell.elastic.autoscale import Autoscaler
from reconciler.desired.runtime import endpoints_path
from reconciler.shell.gateway.record import facts as gateway_facts
from reconciler.world import FRONTEND
from reconciler.world import DesiredRecipe, Observed

log = structlog.get_logger("reconciler")


def record(state: StateDir, snap: Snapshot, routers: router_sync.RouterSync) -> None:
    """``routers``: the controller's router worker sets (what it POSTed lately)."""
    m, d, o, p = snap.manifests, snap.desired, snap.observed, snap.plan
    now = snap.now
    for f in snap.failed_launches:
        s = f.step
        srun = step_log_paths(state.root, s.recipe, s.life, s.rank).srun
        # refused for the recipe's (or the cluster config's) own reason: srun's first line says why
        line = refused.launch_refusal(state.root, s)
        msg = f"{s.role}_{s.index} rank {s.rank}: launcher exited {f.exited}: {line or refused.launch_said(srun, s.spec_hash)}"
        log.error("launch failed", recipe=s.recipe, unit=f"{s.role}_{s.index}", exit=f.exited,
                  **({"reason": WORD, "refused": line} if line else {}))
        state.event("LaunchFailed", s.recipe, msg, **({"reason": WORD} if line else {}))
    for r in snap.reassigned:
        taken = ", ".join(f"{n}:{port}" for n, port in r.taken)
        log.warning("port conflict: new ports for the worker", recipe=r.recipe, unit=r.unit, ports=taken)
        state.event("PortConflict", r.recipe, f"{r.unit} could not bind ({taken}): another process holds "
                    "it; the worker gets new ports and those are avoided for an hour")
    for name, text in m.texts.items():
        try:
            state.write_last_applied(name, text)
        except OSError as e:  # one recipe's directory that cannot be written must not stop the others
            log.error("cannot write the recipe's last applied spec", recipe=name, error=f"{type(e).__name__}: {e}")
    state.write_files(m.paths)
    renames.record_changes(state, m)
    state.write_text(state.root / "ports.json", snap.ports.dumps())  # unchanged: not rewritten
    for dr in d.recipes.values():
        if dr.suspended:
            continue  # no action of any kind: its routers keep the workers they have
        try:
            write_endpoints(state, dr, o, now)
        except OSError as e:
            log.error("cannot write the router's endpoints", recipe=dr.name, error=str(e))
        for c in routers.sync(dr, o, at=now):
            state.event("RouterWorkers", dr.name, f"{c.verb} {c.url} {'to' if c.verb == 'add' else 'from'} the router")
    if not p.refused_prune:
        for name in suspended_names(state.root) - set(d.recipes) - set(m.invalid) - set(d.held):
            set_suspended(state.root, name, False)  # deleted: a recipe made again later starts unsuspended
            state.event("Resumed", name, "its recipe is gone: the suspension is cleared")
    for name, why in d.held.items():
        if not namespaces.fits_state(name):
            continue  # a file refused for its name (quarantine.json.yaml): `get` lists it, state/ holds nothing
        prev = state.status(name)
        if prev.get("error") != state.shown_status(name, {"error": why})["error"]:  # the file's is redacted
            log.error("recipe held", recipe=name, error=why)
            state.event("Held", name, f"desired state cannot be computed, nothing is changed: {why}")
        write_status(state, name, {**prev, "name": name, "phase": "Error", "error": why, "updatedAt": iso(now)}, prev)
    _prune_guard_marks(state, snap)
    names = set(d.recipes) | set(m.invalid) | set(d.kept)
    for name in sorted(names):
        if not namespaces.fits_state(name):
            continue  # its directory would be a file of state/'s own, or too long a name
        try:
            _recipe_status(state, snap, name, now)
        except Exception as e:  # noqa: BLE001 - one recipe's bookkeeping must not stop the others'
            log.exception("cannot record the recipe's status", recipe=name, error=f"{type(e).__name__}: {e}")
    gone: dict[str, str] = {}  # deleted recipes -> when: their directories go after a retention
    for name in state.known_recipes():
        if name not in names and name not in d.held and not o.steps_of(name) and not o.allocs_of(name):
            st = state.status(name)
            gone[name] = str(st.get("deletedAt") or iso(now))
            if st.get("phase") != "Deleted":
                state.event("Deleted", name, "recipe removed and everything it owned is gone")
                state.write_status(name, {**st, "phase": "Deleted", "deletedAt": iso(now), "workers": []})
                state.prune_launches(name, set())
                Autoscaler.forget(state, name)
            prune_guard.clear(state, name)
    state.expire_deleted(gone, now)


def _prune_guard_marks(state: StateDir, snap: Snapshot) -> None:
    """A confirmed prune (``reconciler prune``) is said once as its teardown starts; a confirmation
    whose file came back is dropped (a later mass deletion must be refused again)."""
    d = snap.desired
    for name in d.prune_confirmed:
        rp = snap.plan.recipes.get(name)
        st = state.status(name)
        if rp is not None and rp.actions and st.get("phase") == prune_guard.REASON:
            state.event("PruneConfirmed", name, "teardown confirmed by `reconciler prune`: "
                        + "; ".join(a.describe() for a in rp.actions))
            state.write_status(name, {**st, "phase": "Terminating", "warning": None, "updatedAt": iso(snap.now)})
    for name in set(d.recipes) | set(d.held):
        if namespaces.fits_state(name) and prune_guard.clear(state, name):
            state.event("PruneCancelled", name, "its manifest is back: the confirmed prune is dropped")


def _recipe_status(state: StateDir, snap: Snapshot, name: str, now: float) -> None:
    d, p = snap.desired.recipes.get(name), snap.plan
    kept = snap.desired.kept.get(name)  # held by the prune guard: shown from its last applied spec
    prev = state.status(name)
    launches = state.launches(name)
    st = build_status(name, d or kept, snap.observed, None if kept else p.recipes.get(name),
                      snap.manifests.invalid.get(name), prev, launches, now, state.exits(name),
                      gateway=gateway_facts(state.root, name))
    reasons.annotate(st["workers"], d or kept, state.root, name, launches)  # why a unit is down, for get and the UI
    reasons.keep_refusal(st["workers"], prev.get("workers") or [])
    st["reason"], st["reasonMessage"] = reasons.deployment_reason(st)
    failed = snap.observed.action_failures.get(name)
    if st["reason"] is None and failed is not None and failed.reason:  # e.g. sbatch refused its partition
        st["reason"], st["reasonMessage"] = failed.reason, failed.message
    renames.annotate(st, snap.manifests, state.root, name)  # being replaced by, or replacing, a renamed one
    if kept is not None:
        why = prune_guard.why(name, state.files())
        if prev.get("phase") != prune_guard.REASON:
            log.warning("manifest missing: the prune guard keeps the deployment running", recipe=name)
            state.event(prune_guard.REASON, name, why, type="Warning")
        prune_guard.mark(st, prev, why, now)
    lost = state.read_json(state.path_of(name, "allocation-lost.json"), None, lambda x: isinstance(x, dict))
    if lost:
        st["lastAllocationLost"] = lost  # Slurm's state and reason for the last allocation that went away
    for cond in st["conditions"]:
        old = next((c for c in prev.get("conditions", []) if c["type"] == cond["type"]), None)
        if old is None or old["status"] != cond["status"]:
            state.event("Condition", name, f"{cond['type']}={cond['status']}: {cond['message']}",
                        reason=cond["reason"], condition=cond["type"], status=cond["status"])
    write_status(state, name, st, prev)
    describe_facts.write(state, snap, name)  # describe's live facts: it answers from the record
    if d is not None:
        # scaled to zero (no unit at all): the frontend goes too, and its comeback is a new launch, not a restart
        zero = not d.units and not d.frontends and not d.waiting
        state.prune_launches(name, {f"{r}_{i}" for r, i in d.unit_keys} | {f"{FRONTEND}_{u.index}" for u in d.frontends}
                             | (set() if zero else {f"{FRONTEND}_0"}))
        rp = p.recipes.get(name)
        for unit in rp.reset_backoff if rp else ():
            state.reset_backoff(name, unit)
        o = snap.observed
        for u in d.units:  # launch-to-Ready, seen through by this process: the hand-over time's input
            h = o.health.get(u.key)
            if h and o.ready.get(u.key) and h.ready_since and h.last_launch and h.watched_since is not None \
                    and h.watched_since - h.last_launch < 30 and h.ready_after is None:
                state.note_ready_after(name, u.name, h.last_launch, h.ready_since - h.last_launch)


def write_status(state: StateDir, name: str, st: dict, prev: dict) -> None:
    """``updatedAt`` is when the status last changed: a settled recipe's file is not rewritten."""
    if prev.get("updatedAt"):
        same = {**st, "updatedAt": prev["updatedAt"]}
        if not state.status_changed(name, same):
            return
    state.write_status(name, st)


def write_endpoints(state: StateDir, d: DesiredRecipe, o: Observed, now: float) -> None:
    if d.frontend is None:
        return  # only the builtin router reads an endpoints file
    workers = [
        {"url": u.url, "role": u.role, "name": u.name, "node": u.nodes[0]}
        # serving, not just Ready at this probe: one slow /health answer (a 1 s probe timeout on a busy
        # node) must not empty the list of a one-worker role and turn every request into a 503 until
        # the next pass (the SGLang/vLLM routers get the same tolerance, router_sync.serving)
        for u in d.units if router_sync.serving(d, o, u)
    ] + [{"url": u.url, "role": u.role, "name": u.life, "node": u.nodes[0]} for u in router_sync.old_lives(d, o, now, strict=True)]
    state.write_json(endpoints_path(state.root, d.name), {"recipe": d.name, "workers": workers})
