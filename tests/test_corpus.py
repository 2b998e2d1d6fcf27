"""Every recipe in the srt-slurm corpus validates or is rejected for an unsupported feature."""

from __future__ import annotations

import collections

from conftest import SUMMARIES

from reconciler.errors import RecipeError
from reconciler.recipe.load import load_recipe


def _walk(root):
    return sorted(p for sub in ("srt-slurm-v1", "srt-slurm-v2") for p in (root / sub).rglob("*.yaml"))


def test_corpus_validates_or_names_unsupported_feature(corpus):
    files = _walk(corpus)
    assert len(files) > 500
    valid = 0
    rejected: collections.Counter[str] = collections.Counter()
    surprises = []
    plain_v1_failures = []
    for f in files:
        try:
            load_recipe(f)
            valid += 1
        except RecipeError as e:
            if e.unsupported:
                rejected[e.unsupported] += 1
            else:
                surprises.append(str(e))
            text = f.read_text()
            is_variant = "\nbase:" in "\n" + text or "\nsweep:" in "\n" + text
            if "srt-slurm-v1" in str(f) and not is_variant:
                plain_v1_failures.append(str(e))
        # any other exception escapes and fails the test: that is the point
    lines = [f"corpus: {len(files)} files, {valid} valid, {sum(rejected.values())} rejected as unsupported"]
    lines += [f"  rejected ({n}): {reason}" for reason, n in rejected.most_common()]
    SUMMARIES.append("\n".join(lines))
    print("\n".join(lines))
    assert not surprises, "rejected without naming an unsupported feature:\n" + "\n".join(surprises)
    assert not plain_v1_failures, "plain v1 recipes must validate:\n" + "\n".join(plain_v1_failures)
