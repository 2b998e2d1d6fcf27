"""Every recipe in the srt-slurm corpus validates or is rejected for an unsupported feature."""

from __future__ import annotations

import collections


from pathlib import Path

from reconciler.errors import RecipeError
from reconciler.desired.admission import load_file
from reconciler.desired.render import render_units
from rendered import assert_renders_its_workers


def _walk(root):
    return sorted(p for sub in ("srt-slurm-v1", "srt-slurm-v2") for p in (root / sub).rglob("*.yaml"))


def test_corpus_validates_or_names_unsupported_feature(corpus, summary):
    files = _walk(corpus)
    assert len(files) > 500
    deployments = valid = rendered = variant_files = 0
    rejected: collections.Counter[str] = collections.Counter()
    surprises = []
    plain_v1_failures = []
    for f in files:
        try:
            loaded = load_file(f)
        except RecipeError as e:
            problems = e.problems()
            deployments += len(problems) if "[" in problems[0].path else 1
            for p in problems:
                if p.unsupported:
                    rejected[p.unsupported] += 1
                else:
                    surprises.append(str(p))
            if "srt-slurm-v1" in str(f):
                plain_v1_failures.append(str(e))
            continue
        # any other exception escapes and fails the test: that is the point
        variant_files += any(lr.variant_of for lr in loaded)
        deployments += len(loaded)
        valid += len(loaded)
        for lr in loaded:
            units = render_units(lr.recipe, None, Path("/state"))
            assert_renders_its_workers(lr.recipe, units, f"{f} [{lr.recipe.name}]")
            rendered += 1
    lines = [f"corpus: {len(files)} files ({variant_files} sweep/override), {deployments} deployments after "
             f"expansion, {valid} valid, {rendered} rendered, {sum(rejected.values())} refused"]
    lines += [f"  refused ({n}): {reason}" for reason, n in rejected.most_common()]
    summary("\n".join(lines))
    print("\n".join(lines))
    assert not surprises, "rejected without naming an unsupported feature:\n" + "\n".join(surprises)
    assert not plain_v1_failures, "v1 recipes must validate:\n" + "\n".join(plain_v1_failures)
