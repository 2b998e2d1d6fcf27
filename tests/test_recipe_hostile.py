"""Guards behind the hostile-input probes (tests/test_bad_input.py): the log-pattern check (RE2),
file-probe markers, and what render says of a recipe scaled to zero."""

from __future__ import annotations

import subprocess
import sys

import pytest

from reconciler.recipe.types import check_regex
from reconciler.shell.execute import clear_marker


@pytest.mark.parametrize("pattern, ok", [
    # RE2 matches every one of these in linear time (nested repeats no longer need refusing)
    (r"^(\w+\s?)*$", True), (r"(a+)+b", True), (r"((ab)+c)+", True), (r"(?:a{1,5})+b", True), (r"(a|aa)+b", True),
    (r"(a|b)+x", True), (r"x(a+)?y", True), (r"CUDA error: .*", True), (r"x{2,5}(ab){3}", True),
    # what RE2 cannot do: backreferences, lookaround, a possessive repeat
    (r"(a)\1", False), (r"(?=x)y", False), (r"(?<!x)y", False), (r"(a++)*", False),
])
def test_log_patterns_are_what_re2_matches_in_linear_time(pattern, ok):
    if ok:
        assert check_regex(pattern) == pattern
    else:
        with pytest.raises(ValueError, match="cannot be matched in linear time"):
            check_regex(pattern)


def test_a_marker_outside_the_recipe_directory_is_never_deleted(tmp_path):
    recipe_dir = tmp_path / "state" / "r"
    (recipe_dir / "mooncake").mkdir(parents=True)
    inside = recipe_dir / "mooncake" / "donor-n1.ready"
    outside = tmp_path / "precious"
    inside.write_text("x")
    outside.write_text("keep")
    (recipe_dir / "link").symlink_to(tmp_path)  # a directory link out of the recipe's directory
    assert clear_marker(recipe_dir, inside) and not inside.exists()
    assert not clear_marker(recipe_dir, outside) and outside.read_text() == "keep"
    assert not clear_marker(recipe_dir, recipe_dir / "link" / "precious") and outside.read_text() == "keep"
    assert not clear_marker(recipe_dir, recipe_dir / ".." / "precious") and outside.read_text() == "keep"


def test_render_of_a_recipe_scaled_to_zero_says_nothing_runs(tmp_path):
    f = tmp_path / "z.yaml"
    f.write_text("name: z\nmodel: {path: m}\nengine: mocker\nroles: {agg: {workers: 0, gpus: 1}}\n")
    r = subprocess.run([sys.executable, "-m", "reconciler.cli", "render", str(f), "--state", str(tmp_path / "s")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "no workers (scaled to 0): nothing runs" in r.stdout, r.stderr
