"""A plan as plain data (``reconciler plan -o json``): the named sets and counts per recipe."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from reconciler.core.plan.results import Action, Plan, RecipePlan
from reconciler.recipe.namespaces import display as shown


def action_json(a: Action) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": type(a).__name__, "description": a.describe()}
    reason = getattr(a, "reason", None)
    if reason is not None:
        out["reason"] = reason.name
    return out


def recipe_json(rp: RecipePlan) -> dict[str, Any]:
    return {
        "state": rp.state.name,
        **{k: [action_json(a) for a in getattr(rp, k)] for k in ("submit", "release", "place", "stop", "replace",
                                                                  "deferred")},
        "relaunchLater": dict(rp.relaunch_later),
        "waiting": {u: {"reason": w.reason.name, "detail": w.detail, "until": w.until} for u, w in rp.waiting.items()},
        "counts": {role: asdict(c) for role, c in rp.counts.items()},
        "resetBackoff": list(rp.reset_backoff),
        "detail": rp.detail or None,
    }


def plan_json(p: Plan) -> dict[str, Any]:
    return {
        "actions": [action_json(a) for a in p.actions],
        "requeueAfter": p.requeue_after,
        "refusedPrune": p.refused_prune,
        # keyed as users write a recipe (FOLDER/NAME); the internal key beside it where the two differ
        "recipes": {shown(name): recipe_json(rp) | ({"key": name} if shown(name) != name else {})
                    for name, rp in sorted(p.recipes.items())},
    }
