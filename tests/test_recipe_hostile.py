"""Hostile recipe input: each gets a located error at load, never a surprise at submit or launch."""

from __future__ import annotations

import pytest

from reconciler.errors import ReconcilerError
from reconciler.recipe.load import load_text
from reconciler.recipe.types import check_regex
from reconciler.shell.execute import clear_marker

BASE = """\
schema: 2
name: x
model: {path: /m}
engine: {type: mocker}
roles:
  agg: {workers: 1, gpus: 1%(role)s}
frontend: {type: builtin%(fe)s}
%(extra)s
"""


def load(extra: str = "", role: str = "", fe: str = ""):
    return load_text(BASE % {"extra": extra, "role": role, "fe": fe}, "/m/x.yaml")


@pytest.mark.parametrize("where, text, error", [
    # the options that carry the reconciler's labels, the job's shape and its logs
    ("extra", "sbatch_directives: {'comment=x': ''}", "sbatch_directives.comment=x: expected an sbatch long option"),
    ("extra", "sbatch_directives: {comm: x}", "sbatch --comment is set by the reconciler"),
    ("extra", "sbatch_directives: {job-name: x}", "sbatch --job-name is set by the reconciler"),
    ("extra", "sbatch_directives: {exclude: 'n[1-3'}", "exclude: expected a Slurm hostlist"),
    ("extra", "srun_options: {jobid: '12345'}", "srun_options.jobid: srun --jobid is set"),
    ("extra", "srun_options: {output: /dev/null}", "srun --output is set"),
    ("role", ", srun_options: {job-name: x}", "roles.agg.srun_options.job-name: srun --job-name"),
    ("extra", "services:\n  - {name: s, command: [a], srun_options: {open-mode: truncate}}",
     "services.0.srun_options.open-mode"),
    # a flag with its value in the key slips past the checks on the flags we set
    ("role", ", args: {'port=5555': true}", "roles.agg.args.port=5555: expected a flag name"),
    ("fe", ", args: {'http-port=9999': true}", "frontend.args.http-port=9999: expected a flag name"),
    # a file probe's marker is removed before each launch: it stays in the recipe's directory
    ("extra", "services:\n  - {name: s, command: [a], readiness: {file: {path: '../../x'}}}",
     "services.0.readiness.file.path: a relative path stays under"),
    ("extra", "services:\n  - {name: s, command: [a], readiness: {port: 9000, timeout_seconds: -1}}",
     "services.0.readiness.timeout_seconds"),
    # a log pattern scanned in the tick must not backtrack for ever
    ("extra", "health_check: {extra_fatal_log_patterns: ['^(a+ ?)*$']}",
     "health_check.extra_fatal_log_patterns: '^(a+ ?)*$' repeats a repeat"),
    ("extra", "services:\n  - {name: s, command: [a], readiness: {log: {pattern: '(a+)+b'}}}",
     "services.0.readiness.log.pattern"),
])
def test_hostile_input_is_refused_where_it_is(where, text, error):
    with pytest.raises(ReconcilerError) as e:
        load(**{where: text})
    assert "/m/x.yaml:" in str(e.value) and error in str(e.value), str(e.value)


@pytest.mark.parametrize("text", [
    "sbatch_directives: {cpus-per-gpu: 4, mem: 0, ntasks: 2, exclude: 'n[1-3],g7'}",
    "srun_options: {cpus-per-task: 4, kill-on-bad-exit: 1, mpi: pmix}",
    "services:\n  - {name: s, command: [a], readiness: {file: {path: /shared/marker.ready}}}",
    "health_check: {extra_fatal_log_patterns: ['CUDA error: .*', '(OOM|out of memory)+']}",
])
def test_ordinary_input_still_loads(text):
    load(extra=text)


@pytest.mark.parametrize("pattern, ok", [
    (r"^(\w+\s?)*$", False), (r"(a+)+b", False), (r"((ab)+c)+", False), (r"(?:a{1,5})+b", False),
    (r"(a|b)+x", True), (r"(a++)*", True), (r"x(a+)?y", True), (r"(ab{3})+", True), (r"CUDA error: .*", True), (r"(a*)?", True), (r"x{2,5}(ab){3}", True),
])
def test_nested_unbounded_repeats_are_refused(pattern, ok):
    if ok:
        assert check_regex(pattern) == pattern
    else:
        with pytest.raises(ValueError, match="repeats a repeat"):
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


def test_shadow_engines_are_bounded():
    text = (BASE % {"extra": "", "role": "", "fe": ""}).replace(
        "engine: {type: mocker}", "engine: {type: mocker, failover: {shadow_engines: 20000}}")
    with pytest.raises(ReconcilerError, match="engine.failover.shadow_engines"):
        load_text(text, "/m/x.yaml")


def test_render_of_a_recipe_scaled_to_zero_says_nothing_runs(tmp_path):
    import subprocess
    import sys

    f = tmp_path / "z.yaml"
    f.write_text((BASE % {"extra": "", "role": "", "fe": ""}).replace("workers: 1", "workers: 0"))
    r = subprocess.run([sys.executable, "-m", "reconciler.cli", "render", str(f), "--state", str(tmp_path / "s")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "no workers (scaled to 0): nothing runs" in r.stdout, r.stderr
