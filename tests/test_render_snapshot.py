"""Every corpus recipe renders byte-identically to the snapshot taken before the desired-state
pipeline was restructured (argv, env, ports, GPUs, spec hashes): a refactor of the pipeline changes
nothing a recipe launches, and running workers are adopted without a rollout."""

from __future__ import annotations

import difflib
import gzip
import json

from render_snapshot import SNAPSHOT, render_all


def test_corpus_renders_match_the_snapshot():
    with gzip.open(SNAPSHOT, "rt", encoding="utf-8") as f:
        want = json.load(f)
    got = render_all()
    assert len(want) > 500 and set(got) == set(want), sorted(set(got) ^ set(want))[:10]
    changed = [k for k in sorted(want) if got[k] != want[k]]
    if changed:
        first = changed[0]
        diff = "\n".join(list(difflib.unified_diff(want[first].splitlines(), got[first].splitlines(),
                                                   "snapshot", "now", lineterm=""))[:60])
        raise AssertionError(f"{len(changed)} of {len(want)} renders changed, first {first}:\n{diff}")


def test_corpus_builds_adopt_what_runs():
    """The upgrade: from the port registry the old build left, the desired state of every corpus
    recipe on running allocations — fresh, adopted on its current spec, and mid-rollout — is the
    one the build made before the pipeline was restructured (spec hashes, slots, ports, old lives)."""
    from build_snapshot import SNAPSHOT as BUILDS, build_all

    from reconciler.desired.build import build_recipe

    with gzip.open(BUILDS, "rt", encoding="utf-8") as f:
        want = json.load(f)
    got, _ = build_all(build_recipe, want["registries"])
    assert len(want["builds"]) > 500 and set(got) == set(want["builds"]), sorted(set(got) ^ set(want["builds"]))[:10]
    changed = [k for k in sorted(got) if got[k] != want["builds"][k]]
    if changed:
        first = changed[0]
        a = json.dumps(want["builds"][first], indent=1, sort_keys=True).splitlines()
        b = json.dumps(got[first], indent=1, sort_keys=True).splitlines()
        diff = "\n".join(list(difflib.unified_diff(a, b, "snapshot", "now", lineterm=""))[:80])
        raise AssertionError(f"{len(changed)} of {len(got)} builds changed, first {first}:\n{diff}")
