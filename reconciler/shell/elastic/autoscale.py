"""The autoscaler's edge: read the workers' metrics, keep the decisions' memory, say what changed.

Per recipe with ``reconcile.autoscale``, every ``interval_seconds`` after a tick: the Prometheus
pages of its autoscaled roles' Ready workers (and of the workers draining, and of its frontends)
are read through the probe pool, summed per role into ``Load`` facts, and handed to
``core/plan/autoscale.compute_autoscale``. Its memory and the last decisions with their inputs
are kept in state/<recipe>/autoscale.json; each change of a role's count is an event with its
reason. The next tick's desired state is built at the counts kept there (``overrides``), which
``get`` and ``plan`` read too (read-only). Losing the file restarts every role at its file's
``workers:``.

Every tick (every recipe, autoscaled or not) the lives that became Ready are noted in
state/<recipe>/startup.json (``startup_log.py``); a decision hands each role's measured startup to
the core (the predictive policy sizes one startup ahead; a wake-up's 503 says it as its wait).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import structlog

from reconciler.core.plan.autoscale import (
    Load, RoleFacts, RoleMemory, compute_autoscale, from_json, start, to_json,
)
from reconciler.core.plan.spares import promoted, spare_indices
from reconciler.core.plan.demand import beyond_canaries, canary_allowance, held_requests
from reconciler.core.plan.demand import demand as wants_workers
from reconciler.core.plan.stop import loading as still_loading
from reconciler.desired.scale import Scale
from reconciler.drivers.state import StateDir
from reconciler.recipe.autoscale import AutoscaleConfig
from reconciler.recipe.model import Recipe
from reconciler.shell.elastic import engine_metrics as em
from reconciler.shell.elastic.startup_log import StartupLog, brief
from reconciler.shell.readiness import canary
from reconciler.shell.readiness import probe
from reconciler.shell.gateway import holder_supervisor
from reconciler.shell.gateway import wake_eta
from reconciler.shell.snapshot import Snapshot
from reconciler.timefmt import iso

log = structlog.get_logger("reconciler")
FILE = "autoscale.json"
KEEP_DECISIONS = 20  # the last changes kept for `describe`


class Autoscaler:
    def __init__(self, state: StateDir):
        self.state = state
        self._before: dict[str, tuple[float, em.Reading]] = {}  # metrics URL -> (when, its last reading)
        self._due: dict[str, float] = {}  # recipe -> the next decision's time
        # unit key -> when it was first left out of the routers (the endpoints file, the /workers
        # API): a router picks that up a moment later, so the victim is not idle before then
        self._left: dict[tuple[str, str, int], float] = {}
        self._looked: dict[str, float] = {}  # recipe -> when its metrics were last read
        self._received: dict[str, int] = {}  # recipe -> its holder's requests received, at the last look
        self.startup = StartupLog(state)  # each role's launch-to-Ready, kept in state/<recipe>/startup.json
        self._routed: dict[tuple[str, str], float] = {}  # (recipe, unit) -> the launch whose first request was noted

    # ---------------------------------------------------------------- read by every snapshot
    def memory(self, name: str, recipe: Recipe, now: float) -> dict[str, RoleMemory]:
        cfg = recipe.reconcile.autoscale
        assert cfg is not None
        doc = self.state.read_json(self.state.path_of(name, FILE), {}, lambda d: isinstance(d, dict))
        kept = doc.get("roles") if isinstance(doc.get("roles"), dict) else {}
        layouts = recipe.role_layouts()
        out = {}
        for role, rs in cfg.roles.items():
            m = from_json(kept.get(role), rs) if role in kept else None
            out[role] = m if m is not None else start(layouts[role].workers, now)  # type: ignore[index]
        return out

    def overrides(self, recipes: Mapping[str, Recipe], now: float) -> dict[str, Scale]:
        """The counts (and draining workers) the desired state is built with, per autoscaled recipe."""
        out = {}
        for name, r in recipes.items():
            if r.reconcile.autoscale is None:
                continue
            try:
                mem = self.memory(name, r, now)
            except Exception as e:  # noqa: BLE001 - a bad memory file never stops a tick: the file's counts
                log.warning("autoscale: cannot read the memory", recipe=name, error=f"{type(e).__name__}: {e}")
                continue
            spares = _spares(r.reconcile.autoscale, mem)
            out[name] = Scale({role: m.built + len(spares[role]) for role, m in mem.items()},
                              frozenset(f"{role}_{i}" for role, m in mem.items() for i in m.draining),
                              frozenset(f"{role}_{i}" for role, idx in spares.items() for i in idx))
        return out

    # ---------------------------------------------------------------- after a tick (run only)
    def after_tick(self, snap: Snapshot) -> bool:
        """Decide for every autoscaled recipe that is due; True when a built count or the draining
        set changed (the loop then ticks again soon, so that the change is acted on)."""
        moved = False
        try:
            self.startup.note(snap)
        except Exception as e:  # noqa: BLE001 - the startup record never stops the loop
            log.warning("startup: cannot note the lives", error=f"{type(e).__name__}: {e}")
        for name, recipe in snap.manifests.recipes.items():
            cfg = recipe.reconcile.autoscale
            d = snap.desired.recipes.get(name)
            if cfg is None or d is None or d.suspended:
                self._due.pop(name, None)  # not decided on: no wake-up is due for it
                continue
            if snap.now < self._due.get(name, 0.0):
                continue
            self._due[name] = snap.now + cfg.interval_seconds
            try:
                moved |= self._decide(name, recipe, cfg, snap)
            except Exception as e:  # noqa: BLE001 - one recipe's autoscaler must not stop the loop
                log.exception("autoscale failed", recipe=name, error=f"{type(e).__name__}: {e}")
        for memo in (self._due, self._looked, self._received):  # a recipe made again starts afresh
            for gone in set(memo) - set(snap.manifests.recipes):
                del memo[gone]
        for key in [k for k in self._routed if k[0] not in snap.manifests.recipes]:
            del self._routed[key]
        return moved

    @staticmethod
    def forget(state: StateDir, name: str) -> None:
        """A deleted recipe's counts and decisions go with it: one made again under its name starts
        at its file's ``workers:`` with a whole idle window, not at the old one's last count."""
        state.path_of(name, FILE).unlink(missing_ok=True)

    def next_due(self) -> float | None:
        return min(self._due.values(), default=None)

    def _decide(self, name: str, recipe: Recipe, cfg: AutoscaleConfig, snap: Snapshot) -> bool:
        now, d, o = snap.now, snap.desired.recipes[name], snap.observed
        mem = self.memory(name, recipe, now)
        roles = dict(cfg.roles.items())
        facts, held = self._facts(name, cfg, d, o, mem, now)
        startups = self.startup.startups(name, list(roles), d.startup_grace)
        decisions = compute_autoscale(cfg, facts, mem, now, startups)
        spares_before = _spares(cfg, mem)
        spares_after = _spares(cfg, {role: dec.memory for role, dec in decisions.items()})
        doc = self.state.read_json(self.state.path_of(name, FILE), {}, lambda x: isinstance(x, dict))
        history = list(doc.get("decisions", []))[-KEEP_DECISIONS:] if isinstance(doc.get("decisions"), list) else []
        last = {}
        moved = False
        # the events are told once autoscale.json holds the decision they tell: a reader that sees
        # a Scaled event finds its decision in the file (it used to be written after them)
        tells: list = []
        for role, dec in decisions.items():
            before, after = mem[role], dec.memory
            rs = roles[role]
            last[role] = {"at": iso(now), "ask": dec.ask, "reason": dec.reason, "inputs": dict(dec.inputs),
                          "ready": facts[role].ready, "target": after.target, "built": after.built,
                          "min": rs.min, "max": rs.max,
                          "draining": [f"{role}_{i}" for i in after.draining], "coming": coming(d, o, role, now),
                          "policy": cfg.policy, "startup": brief(startups[role]),
                          "spares": [{"name": f"{role}_{i}", "ready": _ready(d, o, role, i)} for i in spares_after[role]]}
            if held:
                last[role]["held"] = held
            if dec.scaled:
                history.append({"at": iso(now), "role": role, "from": before.target, "to": after.target,
                                "reason": dec.reason, "inputs": dict(dec.inputs)})
            tells.append(lambda role=role, dec=dec, before=before, after=after: (
                self._tell(name, role, cfg, dec, before, held, startups[role].p90, last[role]["draining"]),
                self._tell_promoted(name, role, d, o, promoted(spares_before[role], after.built),
                                    len(spares_after[role]))))
            moved |= ((after.built, list(after.draining), spares_after[role])
                      != (before.built, list(before.draining), spares_before[role]))
        wake = wake_eta.track(doc.get("wake"), decisions, facts, now)
        if cfg.scale_to_zero_after_seconds is not None:
            measured = [s.p90 for s in startups.values() if s.lives]
            wake_eta.tell_holder(self.state.root, name, wake, d, o, now,
                                 at_zero=all(dec.memory.target == 0 for dec in decisions.values()),
                                 startup=max(measured) if measured else None)
        self.state.write_json(self.state.path_of(name, FILE), {
            "recipe": name, "roles": {r: to_json(dec.memory) for r, dec in decisions.items()},
            "last": last, "decisions": history[-KEEP_DECISIONS:], "wake": wake})
        for tell in tells:
            tell()
        return moved

    def _facts(self, name: str, cfg: AutoscaleConfig, d, o, mem: Mapping[str, RoleMemory],
               now: float) -> tuple[dict[str, RoleFacts], int]:
        """(each role's facts for this decision, the requests held at the gateway): the serving
        workers' pages read once, the drain victims' and the frontends' with them."""
        roles = dict(cfg.roles.items())
        # warm spares are Ready but out of the routers: no serving capacity, no load, not idle-keeping
        serving = [u for u in d.units if u.role in roles and o.ready.get(u.key) and u.name not in d.draining
                   and u.name not in d.spares]
        victims = [u for u in d.units if u.name in d.draining]
        pages = _pages([*serving, *victims, *d.frontends])
        # the readiness canaries of the time since the last look (not the configured interval: a look
        # that comes late on a busy host spans more of them, which must not read as traffic)
        since = max(cfg.interval_seconds, now - self._looked.get(name, now))
        self._looked[name] = now
        allowance = canary_allowance(len(d.frontends), since, canary.CANARY_INTERVAL)
        facts: dict[str, RoleFacts] = {}
        held = self._held(name, cfg)  # requests waiting at the gateway's holder (scale to zero)
        demand = wants_workers(held, self._frontend_requests(d.frontends, pages, now), allowance,
                               (m.target for m in mem.values()))
        launched = {(s.role, s.index) for s in o.steps_of(name) if not s.terminating}
        for role in roles:
            mine = [u for u in serving if u.role == role]
            load = self._load(mine, pages, now, allowance)
            busy_victims = any(_busy(pages.get(_url(u))) or now - self._left.setdefault(u.key, now) < d.surge_pickup_seconds
                               for u in victims if u.role == role)
            # a wake-up's (or relaunch's) worker still loading: the role is not idle (scale to zero)
            loading = any(still_loading(d, o.health.get(u.key), now) for u in d.units if u.role == role
                          and (u.role, u.index) in launched and not o.ready.get(u.key) and u.name not in d.spares)
            facts[role] = RoleFacts(len(mine), load, busy_victims, demand, loading)
        for u in victims:  # a victim's reading is not kept once it is gone
            self._before.pop(_url(u), None)
        for key in [k for k in self._left if k[0] == name and k not in {u.key for u in victims}]:
            del self._left[key]  # stopped, or back in the routers
        self._note_routed(name, serving, pages, o, now)
        return facts, held

    def _tell(self, name: str, role: str, cfg: AutoscaleConfig, dec, before: RoleMemory, held: int,
              startup_p90: float, draining: list[str]) -> None:
        """The decision's events: Scaled when the count changed, Draining when victims left the routers."""
        after = dec.memory
        if dec.scaled:
            verb = "up" if dec.scaled > 0 else "down"
            why = ("ScaledToZero" if after.target == 0 else "WokeUp" if before.target == 0 else
                   "ScaledUp" if dec.scaled > 0 else "ScaledDown")
            extra = f"; {held} request(s) held at the gateway" if why == "WokeUp" and held else ""
            self.state.event("Scaled", name, f"{role} scaled {verb} {dec.reason}{extra}", role=role,
                             reason=why, policy=cfg.policy, startupP90=startup_p90,
                             **{"from": before.target, "to": after.target})
        if after.drain_since is not None and after.drain_since != before.drain_since:
            self.state.event("Draining", name, f"{', '.join(draining)} out of the routers; "
                             f"stopped once their requests are done (at most {cfg.drain_timeout_seconds:g}s)",
                             role=role)

    def _tell_promoted(self, name: str, role: str, d, o, up: list[int], kept: int) -> None:
        if up:
            names = ", ".join(f"{role}_{i}" + ("" if _ready(d, o, role, i) else " (not Ready yet: routed once it is)")
                              for i in up)
            self.state.event("SparePromoted", name, f"{names} routed from the warm spares (no cold start); "
                             f"{kept} spare(s) kept behind it", role=role, promoted=[f"{role}_{i}" for i in up])

    def _note_routed(self, name: str, serving: list, pages: dict[str, em.Reading | None], o, now: float) -> None:
        """A serving worker's first request of its life (a client's or a canary's: either went through
        a router to it), seen at this look: launch-to-routed, at most one interval late."""
        for u in serving:
            r, h = pages.get(_url(u)), o.health.get(u.key)
            if r is None or h is None or not h.last_launch or self._routed.get((name, u.name)) == h.last_launch:
                continue
            if r.requests > 0 or r.gauges.get("running", 0.0) > 0 or r.gauges.get("waiting", 0.0) > 0:
                self._routed[(name, u.name)] = h.last_launch
                self.startup.routed(name, u.role, u.name, h.last_launch, now)

    def _held(self, name: str, cfg: AutoscaleConfig) -> int:
        """Requests the holder holds now, or that came to it since the last look (a request already
        answered 503 still asked for the deployment); 0 when the recipe does not scale to zero."""
        if cfg.scale_to_zero_after_seconds is None:
            return 0
        s = holder_supervisor.demand(self.state.root, name)
        if s is None:
            return 0
        held, received = int(s.get("held", 0) or 0), int(s.get("received", 0) or 0)
        before = self._received.get(name)
        self._received[name] = received
        return held_requests(held, received, before)

    def _load(self, units: list, pages: dict[str, em.Reading | None], now: float, allowance: float) -> Load | None:
        pairs = []
        for u in units:
            r = pages.get(_url(u))
            if r is None:
                continue
            prev = self._before.get(_url(u))
            pairs.append((r, prev[1] if prev else None))
            self._before[_url(u)] = (now, r)
        if not pairs:
            return None
        # requests beyond the readiness canaries (the reconciler's own one-token completions)
        served = beyond_canaries(sum(em.requests_since(r, b) for r, b in pairs), allowance)
        return Load(len(pairs), sum(r.gauges.get("waiting", 0.0) for r, _ in pairs),
                    sum(r.gauges.get("running", 0.0) for r, _ in pairs),
                    sum(r.gauges.get("kv_usage", 0.0) for r, _ in pairs),
                    em.p90_ms(pairs, "ttft"), em.p90_ms(pairs, "itl"), math.floor(served))

    def _frontend_requests(self, frontends, pages: dict[str, em.Reading | None], now: float) -> float:
        total = 0.0
        for u in frontends:
            r = pages.get(_url(u))
            if r is None:
                continue
            prev = self._before.get(_url(u))
            self._before[_url(u)] = (now, r)
            total += em.requests_since(r, prev[1] if prev else None)
        return total


def _spares(cfg: AutoscaleConfig, mem: Mapping[str, RoleMemory]) -> dict[str, range]:
    """role -> its warm spares' indices, above the workers built for it (core/plan/spares.py)."""
    maxes = dict(cfg.roles.items())
    return {role: spare_indices(m.target, m.built, cfg.warm, maxes[role].max) for role, m in mem.items()}


def _ready(d, o, role: str, index: int) -> bool:
    return any(bool(o.ready.get(u.key)) for u in d.units if u.role == role and u.index == index)


def coming(d, o, role: str, now: float) -> list[str]:
    """The role's workers that wait for an allocation still in Slurm's queue, with Slurm's reason and
    expected start (squeue --start, asked at the pending-recheck pace): capacity already coming,
    which the count decided includes (it is never asked for twice)."""
    waiting = [f"{r}_{i}" for r, i in d.waiting if r == role]
    if not waiting:
        return []
    infos = [o.pending[a.job_id] for a in o.allocs_of(d.name) if a.job_id in o.pending]
    return [f"{', '.join(waiting)} wait for " + ("; ".join(i.explain(now) for i in infos) or "their allocation")]


def _url(u) -> str:
    return f"http://{u.nodes[0]}:{u.health_port}{u.metrics_path or '/metrics'}"


def _busy(r: em.Reading | None) -> bool:
    """A draining victim with requests still running or queued (unknown: assumed busy, bounded by the
    drain timeout)."""
    return r is None or r.gauges.get("running", 0.0) > 0 or r.gauges.get("waiting", 0.0) > 0


def _pages(units: list) -> dict[str, em.Reading | None]:
    urls = sorted({_url(u) for u in units if u.health_port and u.nodes})
    texts = probe.fetch_all(urls)
    out: dict[str, em.Reading | None] = {}
    for url, text in texts.items():
        try:
            out[url] = em.parse(text) if text is not None else None
        except ValueError:
            out[url] = None  # not Prometheus text: as if it did not answer
    return out
