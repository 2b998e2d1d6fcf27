"""Which of its two life slots each worker's desired life goes in. Pure.

A worker (``role_index``) has two slots, each with its own ports and log files
(``world.life_name``), so that during a rollout with surge the new life runs beside the
old one instead of after it. The slot is read back from the world each tick (step
labels carry it), never remembered:

- a worker with steps on its allocation keeps the slot of its newest step there;
- a worker whose steps all sit on another allocation moves into the other slot;
- a worker with no step keeps the slot whose ports it holds (slot 0 when none).

Then, once the units are built, ``surge_flips`` names the workers whose steps on their
allocation all run an older spec: with ``max_surge`` > 0 their new life takes the other
slot (when no step holds it), and the old one stays until the new one is Ready.

GPUs: a life in slot 1 of an engine that uses its GPUs runs on the *mirror* of its slot-0
GPUs on each node (shifted past every GPU the recipe's layout uses there) when its
allocation holds them (``reconcile.rollout.surge_gpus``), so both lives of a worker
never share a GPU; the rule depends only on the allocation's size, so the assignment is
the same every tick. Where the two slots' GPUs would overlap on one allocation, the
worker is rolled in place instead (``desired.py``: ``no_room``). A life on a successor
allocation (a hand-over) has that allocation's GPUs to itself in either slot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from reconciler.recipe.topology import Endpoint
from reconciler.frozen import evolve
from reconciler.world import Unit
from reconciler.world import Step

Key = tuple[str, int]  # (role, index)


def _newest(steps: Iterable[Step]) -> Step:
    def order(s: Step) -> tuple[int, int, str]:
        tail = s.step_id.rsplit(".", 1)[-1]
        # a launch in flight ("<job>.pending-...") is newer than anything squeue shows
        return (s.pending, int(tail) if tail.isdigit() else -1, s.step_id)

    return max(steps, key=order)


def choose_slots(
    keys: Iterable[Key], steps: Iterable[Step], job_of: Mapping[Key, str], held: Mapping[Key, tuple[bool, bool]],
) -> dict[Key, int]:
    """``held``: per worker, whether slot 0 / slot 1 owns ports in the registry."""
    by_key: dict[Key, list[Step]] = {}
    for s in steps:
        by_key.setdefault((s.role, s.index), []).append(s)
    out: dict[Key, int] = {}
    for key in keys:
        mine = by_key.get(key, [])
        here = [s for s in mine if s.job_id == job_of.get(key)]
        if here:
            out[key] = _newest(here).slot
        elif mine:
            out[key] = 1 - _newest(mine).slot  # moving to another allocation: beside the old life
        else:
            h0, h1 = held.get(key, (False, False))
            out[key] = 1 if h1 and not h0 else 0
    return out


def surge_flips(units: Iterable[Unit], steps: Iterable[Step], job_of: Mapping[Key, str], max_surge: int) -> set[Key]:
    """Workers whose new life goes in the other slot: every step on their allocation runs an
    older spec, and none holds the other slot."""
    if max_surge <= 0:
        return set()
    by_key: dict[Key, list[Step]] = {}
    for s in steps:
        by_key.setdefault((s.role, s.index), []).append(s)
    out: set[Key] = set()
    for u in units:
        key = (u.role, u.index)
        mine = by_key.get(key, [])
        here = [s for s in mine if s.job_id == job_of.get(key)]
        if not here or any(s.spec_hash == u.spec_hash and s.slot == u.slot for s in here):
            continue
        if any(s.slot != u.slot for s in mine):
            continue  # the other slot is taken (a surge life, or an old life still going)
        out.add(key)
    return out


def layout_gpus(endpoints: Iterable[Endpoint]) -> dict[int, int]:
    """node ordinal -> GPUs the recipe's layout uses there (the highest index + 1)."""
    used: dict[int, int] = {}
    for ep in endpoints:
        for o in ep.nodes:
            used[o] = max(used.get(o, 0), max(ep.gpus) + 1 if ep.gpus else 0)
    return used


def in_slot(ep: Endpoint, slot: int, needs_gpus: bool, used: Mapping[int, int], held: int) -> Endpoint:
    """The endpoint as its life in ``slot`` runs it: slot 1 of a GPU engine on the mirror GPUs
    when its allocation holds ``held`` GPUs per node, enough for them."""
    if not slot or not needs_gpus or not ep.gpus:
        # the endpoint itself when its slot is already this one (frozen: nothing to copy)
        return ep if ep.slot == slot else evolve(ep, slot=slot)
    shift = max(used.get(o, 0) for o in ep.nodes)
    if max(ep.gpus) + shift >= held:
        return evolve(ep, slot=1)
    return evolve(ep, slot=1, gpus=tuple(g + shift for g in ep.gpus))
