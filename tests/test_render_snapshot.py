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
