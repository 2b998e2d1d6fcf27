"""What a render must hold for any valid recipe, for the corpus-wide tests: not merely "something
rendered" but one unit per declared worker (role and index, as the recipe's endpoints say) and
a step behind every unit (each launch with an argv and nodes)."""

from __future__ import annotations

from reconciler.backends.registry import endpoints_of

WORKER_ROLES = ("agg", "prefill", "decode")


def assert_renders_its_workers(recipe, units, where: object) -> None:
    want = sorted((e.mode, e.index) for e in endpoints_of(recipe))
    got = sorted((u.role, u.index) for u in units if u.role in WORKER_ROLES)
    assert got == want, f"{where}: workers rendered {got}, the recipe declares {want}"
    for u in units:
        assert u.launches, f"{where}: {u.role}_{u.index} has no launch"
        for launch in u.launches:
            assert launch.argv and launch.nodes, f"{where}: {u.role}_{u.index} rank {launch.rank}: {launch}"
