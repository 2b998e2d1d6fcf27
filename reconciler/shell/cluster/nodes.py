"""The edge of the suspect-node policy (core/plan/nodes.py): asks Slurm about the nodes that
matter, keeps the suspects in state/nodes.json, says what happened, and releases allocations
Slurm requeued. The decisions are the core's; this module only reads and acts.

Slurm is asked (one ``scontrol show node`` for the nodes in question) only when an allocation
was lost or a node is suspect: a healthy cluster costs no extra command.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import structlog

from reconciler.core.plan import nodes as policy
from reconciler.drivers import Driver
from reconciler.drivers.state import StateDir
from reconciler.timefmt import iso
from reconciler import hostlist
from reconciler.world import Alloc, AllocSpec

log = structlog.get_logger("reconciler")
FILE = "nodes.json"


class NodeWatch:
    def __init__(self, state: StateDir, driver: Driver, cooldown: float = policy.DEFAULT_COOLDOWN):
        self.state = state
        self.driver = driver
        self.cooldown = cooldown
        self.suspects: dict[str, policy.Suspect] = self._load()
        self._pools: dict[str | None, tuple[str, ...] | None] = {}  # partition -> its nodes, this tick

    def _ask(self, nodes: Iterable[str]) -> dict[str, tuple[str, str]]:
        ask = getattr(self.driver, "node_states", None)  # only Slurm has nodes to ask about
        return ask(sorted(set(nodes))) if ask else {}

    def lost(self, a: Alloc, end_state: str, now: float) -> dict[str, str]:
        """An allocation ended ``end_state`` ("": it just left the queue, end not known yet): the
        nodes it lost (with Slurm's reason) become suspect. Returns them."""
        if (end_state and end_state.upper() not in policy.NODE_LOSS_STATES) or not a.nodes:
            return {}
        lost = policy.lost_nodes(end_state, a.nodes, self._ask(a.nodes))
        # a node already suspect and not back yet is the same failure seen again (the job left the
        # queue, then its end state came): one event; one back in its cool-down failed anew
        fresh = {n: r for n, r in lost.items() if n not in self.suspects or self.suspects[n].back_at is not None}
        what = f"allocation {a.index} (job {a.job_id}) " + (f"ended {end_state}" if end_state else "left the queue")
        self._update(fresh, {}, now, a.recipe, what)
        return lost

    def tick(self, now: float) -> None:
        """Follow the suspects' states: cool-downs start when Slurm reports a node back, and end."""
        self._pools = {}  # asked again this tick
        if self.suspects:
            self._update({}, self._ask(self.suspects), now, None, "")

    def excluded(self) -> tuple[str, ...]:
        return policy.excluded(self.suspects)

    def exclusion_for(self, spec: AllocSpec) -> tuple[str, ...]:
        """The suspects a new allocation excludes: as many as leave it placeable in its partition
        (Slurm refuses a job the partition cannot hold: "Requested node configuration is not
        available"). The partition is asked only while a node is suspect."""
        if not self.suspects:
            return ()
        pool = self._pool(spec.partition)
        out = policy.placeable_exclusion(self.suspects, spec.count, pool, _own_exclusions(spec))
        kept_in = sorted(set(self.suspects) - set(out))
        if kept_in:
            msg = (f"allocation {spec.index} needs {spec.count} node(s) of {len(pool or ())} in its partition: "
                   f"suspect {','.join(kept_in)} not excluded (nodes Slurm reports failed are excluded first)")
            log.warning("suspect exclusion relaxed", recipe=spec.recipe, nodes=kept_in)
            self.state.event("ExclusionRelaxed", spec.recipe, msg, nodes=kept_in)
        return out

    def hold_submission(self, spec: AllocSpec, now: float) -> str | None:
        """Why a new allocation is not submitted yet (``policy.submit_hold``), or None."""
        if not self.suspects:
            return None
        return policy.submit_hold(self.suspects, self._pool(spec.partition), _own_exclusions(spec), now)

    def _pool(self, partition: str | None) -> tuple[str, ...] | None:
        """The partition's nodes, asked of Slurm once per tick (the hold and the exclusion of one
        submission both need them)."""
        if partition not in self._pools:
            ask = getattr(self.driver, "partition_nodes", None)
            self._pools[partition] = ask(partition) if ask else None
        return self._pools[partition]

    def release_requeued(self, previous: Mapping[str, Alloc], current: list[Alloc], now: float) -> set[str]:
        """Cancel our allocations that Slurm requeued (or shrank); return their job ids. The nodes
        Slurm reports down among those they ran on become suspect first."""
        done = set()
        for job_id, why in policy.to_release(previous, current).items():
            a = next(x for x in current if x.job_id == job_id)
            if job_id in previous:
                self.lost(previous[job_id], "", now)
            try:
                self.driver.cancel_alloc(job_id)
            except Exception as e:  # noqa: BLE001 - the next tick tries again
                log.warning("cannot release a requeued allocation", job=job_id, error=str(e))
                continue
            msg = f"allocation {a.index} (job {job_id}) {why}: released, its workers move to a new one"
            log.warning("allocation requeued", recipe=a.recipe, job=job_id, why=why)
            self.state.event("AllocationRequeued", a.recipe, msg, job=job_id)
            done.add(job_id)
        return done

    def release_stale(self, allocs: list[Alloc], excluding: dict[str, tuple[str, ...]],
                      wished: set[str] | None = None) -> set[str]:
        """Cancel our pending allocations submitted excluding a node that no policy wants excluded any
        more (``wished``: suspect, quarantined, reserved; default: the suspects) — the plan submits
        them again with today's exclusion; ``excluding`` forgets jobs that left."""
        live = {a.job_id: a for a in allocs if a.live}
        for job in set(excluding) - set(live):
            del excluding[job]
        pending = {j: exc for j, exc in excluding.items() if live[j].state == "PENDING"}
        done = set()
        for job in policy.stale_pending(pending, tuple(sorted(wished)) if wished is not None else self.excluded()):
            a = live[job]
            try:
                self.driver.cancel_alloc(job)
            except Exception as e:  # noqa: BLE001 - the next tick tries again
                log.warning("cannot release a pending allocation", job=job, error=str(e))
                continue
            msg = (f"allocation {a.index} (job {job}) waits excluding {','.join(excluding[job])}, no longer all "
                   f"suspect, quarantined or reserved: released, submitted again with the current exclusion")
            self.state.event("AllocationResubmitted", a.recipe, msg, job=job)
            del excluding[job]
            done.add(job)
        return done

    # ---------------------------------------------------------------- state
    def _update(self, lost: Mapping[str, str], states: Mapping[str, tuple[str, str]], now: float,
                recipe: str | None, what: str) -> None:
        before = self.suspects
        after = policy.update(before, lost, states, now, self.cooldown)
        for node, reason in lost.items():
            msg = (f"node {node} is suspect: {reason} ({what}); new allocations exclude it until "
                   f"{self.cooldown:g}s after Slurm reports it usable again")
            log.warning("node suspect", node=node, reason=reason, recipe=recipe)
            self.state.event("NodeSuspect", recipe, msg, node=node, reason=reason)
        for node in sorted(set(before) - set(after)):
            msg = f"node {node} usable again: back for {self.cooldown:g}s since it was suspect ({before[node].reason})"
            log.info("node usable", node=node)
            self.state.event("NodeUsable", None, msg, node=node)
        if after != before:
            self.suspects = after
            self._save()

    def _load(self) -> dict[str, policy.Suspect]:
        raw = self.state.read_json(self.state.root / FILE, {}, lambda x: isinstance(x, dict))
        out = {}
        for node, r in raw.get("suspects", {}).items():
            try:
                out[node] = policy.Suspect(node, str(r["reason"]), float(r["since"]),
                                           None if r.get("backAt") is None else float(r["backAt"]))
            except (KeyError, TypeError, ValueError):
                continue  # a damaged record: that node is simply not suspect
        return out

    def _save(self) -> None:
        self.state.write_json(self.state.root / FILE, {"cooldownSeconds": self.cooldown, "suspects": {
            n: {"reason": s.reason, "since": s.since, "sinceIso": iso(s.since), "backAt": s.back_at}
            for n, s in sorted(self.suspects.items())}})


def _own_exclusions(spec: AllocSpec) -> list[str]:
    """The nodes the recipe's own ``exclude`` directive names."""
    return [n for k, v in spec.directives if k == "exclude" for n in hostlist.expand(v)]
