"""Warm spares (``reconcile.autoscale.warm``): workers started and Ready but out of the routers, so that
a scale-up routes one at once instead of paying a cold start. Pure: counts in, counts out.

The spares of a role are its highest indices, right after the workers the autoscaler builds
(``RoleMemory.built``: the serving ones and the scale-down victims still draining). So:

- **Scale-up** raises ``built``: the lowest spare's index is now below it, and it is *promoted* —
  routed on the next router sync, with no launch, since it already runs (the spare that has been
  up longest, hence the one most likely Ready). The count of spares is kept, so one more index
  is built on top: the replacement spare, launched behind it.
- **Scale-down** drains its victims as before; once ``built`` falls, a victim becomes the lowest
  spare (it is already running and Ready) and the highest spare, with no request to finish since
  it was never routed, is stopped.

Spares live within ``max``: ``built + spares <= max`` (a spare beyond max could never be routed,
and ``max`` is the operator's bound on GPUs). A role at zero keeps none: scale to zero means the
deployment's GPUs are released while nobody asks; a spare held then would cost as much as a
serving worker for no request. The wake-up brings the serving worker and its spares back together.
"""

from __future__ import annotations


def spare_count(target: int, built: int, warm: int, most: int) -> int:
    """Spares to keep beside ``built`` workers (``target`` of them serving) for ``warm`` wanted, the role's
    max ``most``."""
    if warm <= 0 or target <= 0:
        return 0
    return max(0, min(warm, most - built))


def spare_indices(target: int, built: int, warm: int, most: int) -> range:
    """The spares' worker indices: right above the built ones."""
    return range(built, built + spare_count(target, built, warm, most))


def promoted(before: range, built: int) -> list[int]:
    """The spares of ``before`` (last decision's spare indices) that a new ``built`` count routes."""
    return [i for i in before if i < built]
