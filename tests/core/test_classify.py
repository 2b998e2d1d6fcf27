"""classify(): what a recipe has, sorted into named sets — one row per situation."""

from __future__ import annotations

import pytest

from builders import desired_recipe, observed, step, unit
from reconciler.core.plan.classify import classify


def names(c) -> dict[str, tuple]:
    return {
        "missing": tuple(v.name for v in c.missing), "running": tuple(v.name for v in c.running),
        "broken": tuple(v.name for v in c.broken), "outdated": tuple(v.name for v in c.outdated),
        "waiting": tuple(f"{r}_{i}" for r, i in c.waiting), "extra": tuple(s.step_id for s, _ in c.extra),
        "duplicates": tuple(s.step_id for s in c.duplicates),
    }


def expect(**kw) -> dict[str, tuple]:
    return {k: tuple(kw.get(k, ())) for k in ("missing", "running", "broken", "outdated", "waiting", "extra",
                                              "duplicates")}


TWO = (unit(index=0), unit(index=1))
MULTI = (unit(index=0, ranks=2),)

CASES = [
    ("nothing runs yet", TWO, (), (), expect(missing=["agg_0", "agg_1"])),
    ("all running", TWO, (step(index=0), step(index=1)), (), expect(running=["agg_0", "agg_1"])),
    ("one ended", TWO, (step(index=0),), (), expect(running=["agg_0"], missing=["agg_1"])),
    ("an older spec", TWO, (step(index=0), step(index=1, spec="old")), (),
     expect(running=["agg_0"], outdated=["agg_1"])),
    ("on another allocation", TWO, (step(index=0), step(index=1, job="99")), (),
     expect(running=["agg_0"], outdated=["agg_1"])),
    ("scaled down: index 2 is extra", TWO, (step(index=0), step(index=1), step(index=2)), (),
     expect(running=["agg_0", "agg_1"], extra=["100.20"])),
    ("a second step for one rank: the newer is the duplicate", TWO,
     (step(index=0, num=3), step(index=0, num=7), step(index=1)), (),
     expect(running=["agg_0", "agg_1"], duplicates=["100.7"])),
    ("a rank of a two-node worker died", MULTI, (step(index=0, rank=0),), (), expect(broken=["agg_0"])),
    ("both ranks", MULTI, (step(index=0, rank=0), step(index=0, rank=1)), (), expect(running=["agg_0"])),
    ("waiting for its allocation: its old steps are left alone", (unit(index=0),), (step(index=0), step(index=1)),
     (("agg", 1),),
     expect(running=["agg_0"], waiting=["agg_1"])),
    ("a terminating step still counts as present", (unit(index=0),), (step(index=0, spec="old", terminating=True),),
     (), expect(outdated=["agg_0"])),
]


@pytest.mark.parametrize("what, units, steps, waiting, want", CASES, ids=[c[0] for c in CASES])
def test_classify(what, units, steps, waiting, want):
    d = desired_recipe(*units, waiting=waiting)
    assert names(classify(d, observed(*steps), frozenset())) == want


def test_steps_on_a_released_allocation_are_extra_even_while_their_unit_waits():
    d = desired_recipe(unit(index=0), waiting=(("agg", 1),))
    c = classify(d, observed(step(index=0), step(index=1, job="99")), frozenset({"99"}))
    assert names(c) == expect(running=["agg_0"], waiting=["agg_1"], extra=["99.10"])
