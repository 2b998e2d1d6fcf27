"""Which of its two life slots each worker's desired life goes in. Pure.

A worker (``role_index``) has two slots, each with its own ports and log files
(``units.life_name``), so that during a rollout with surge the new life runs beside the
old one instead of after it. The slot is read back from the world each tick (step
labels carry it), never remembered:

- a worker with steps on its allocation keeps the slot of its newest step there;
- a worker whose steps all sit on another allocation moves into the other slot;
- a worker with no step keeps the slot whose ports it holds (slot 0 when none).

Then, once the units are built, ``surge_flips`` names the workers whose steps on their
allocation all run an older spec: with ``max_surge`` > 0 their new life takes the other
slot (when no step holds it), and the old one stays until the new one is Ready.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from reconciler.units import Unit
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
