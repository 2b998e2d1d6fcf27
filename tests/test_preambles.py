"""setup_script, default_bash_preamble and host_setup as srtctl treats them (reconciler.desired.preambles):
rendered in srtctl's order, run for real by bash, refused with their key where the reconciler cannot."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.recipe import cluster
from reconciler.backends import dynamo_install
from reconciler.desired import preambles
from reconciler.errors import RecipeError
from reconciler.desired.admission import load_text
from reconciler.desired.render import as_rows, render_units

RECIPE = """\
name: r
model: {path: /m, container: /img.sqsh}
frontend: {type: dynamo}
dynamo: {version: 1.0.0}
engine: sglang
roles: {agg: {workers: 1, gpus: 4}}
"""


def _cfg(tmp_path: Path, text: str) -> cluster.Cluster:
    (tmp_path / "srtslurm.yaml").write_text(text)
    c = cluster.load(tmp_path / "srtslurm.yaml")
    assert c is not None
    return c


def _rows(text: str, c):
    loaded = load_text(text, "r.yaml", c, preflight=False)
    return loaded, as_rows(render_units(loaded.recipe, None, Path("/st")))


def test_worker_runs_the_cluster_snippet_then_the_setup_script_then_the_dynamo_install(tmp_path):
    c = _cfg(tmp_path, "srtctl_root: /opt/srt\ndefault_bash_preamble: 'ulimit -n 1048576 && ulimit -a'\n")
    loaded, rows = _rows(RECIPE + "setup_script: rebuild-deepep.sh\n", c)
    (agg,) = [r for r in rows if r["role"] == "agg"]
    inner, found = preambles.strip(agg["argv"])
    assert found == {"cluster-preamble": "ulimit -n 1048576 && ulimit -a", "setup-script": "rebuild-deepep.sh"}
    assert agg["argv"][3] == "cluster-preamble" and agg["argv"][8] == "setup-script"  # srtctl's order
    argv, script = dynamo_install.strip(inner)
    assert script is not None and "ai-dynamo==1.0.0" in script and argv[:3] == ["python3", "-m", "dynamo.sglang"]
    assert "/opt/srt/configs:/configs" in agg["srun_options"]["container-mounts"]
    assert "setup_script" not in loaded.not_acted_on
    # every container step gets the cluster snippet (srtctl: workers, frontends, ...), only workers the script
    (fe,) = [r for r in rows if r["role"] == "frontend"]
    assert preambles.strip(fe["argv"])[1] == {"cluster-preamble": "ulimit -n 1048576 && ulimit -a"}


def test_without_srtctl_root_or_a_container_the_setup_script_is_carried_with_why(tmp_path):
    loaded, rows = _rows(RECIPE + "setup_script: x.sh\n", _cfg(tmp_path, "cluster: lab\n"))
    (agg,) = [r for r in rows if r["role"] == "agg"]
    assert preambles.strip(agg["argv"])[1] == {} and "srtctl_root" in loaded.not_acted_on["setup_script"]
    host = _cfg(tmp_path, "srtctl_root: /opt/srt\nhost_runtime: {python: /venv/bin/python}\n"
                          "default_bash_preamble: ulimit -a\n")
    loaded, rows = _rows(RECIPE + "setup_script: x.sh\n", host)
    assert all(preambles.strip(r["argv"])[1] == {} for r in rows)  # no container step: nothing to prefix
    assert "hosts' Python" in loaded.not_acted_on["setup_script"]


@pytest.mark.parametrize("name", ["../x.sh", "a/../../x.sh", "/abs.sh", "x y.sh", ".hidden"])
def test_a_setup_script_outside_the_configs_directory_is_a_located_error(name):
    with pytest.raises(RecipeError) as e:
        load_text(RECIPE + f"setup_script: {name!r}\n", "r.yaml", None, preflight=False)
    assert e.value.path.endswith("r.yaml") and "setup_script" in str(e.value)


def test_host_setup_is_refused_with_its_key_and_counted_as_unsupported(tmp_path):
    with pytest.raises(RecipeError) as e:
        load_text(RECIPE + "host_setup: {commands: ['sudo nvidia-smi -lmc 1']}\n", "r.yaml", None, preflight=False)
    assert e.value.key == "host_setup" and e.value.unsupported == "host_setup"
    assert load_text(RECIPE + "host_setup: {nodes: workers}\n", "r.yaml", None, preflight=False)  # empty: nothing to run
    with pytest.raises(RecipeError) as e:
        _cfg(tmp_path, "default_host_setup: {commands: [x]}\n")
    assert e.value.key == "default_host_setup" and "unsupported feature: default_host_setup" in str(e.value)


ECHO = [sys.executable, "-c", "import os, sys; print(os.environ.get('FROM_SNIPPET'), sys.argv[1:])"]


def _bash(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", *args], capture_output=True, text=True, timeout=60, cwd=cwd,
                          env={**os.environ})


def test_the_cluster_snippet_runs_in_the_steps_shell_and_its_failure_stops_the_step(tmp_path):
    odd = "$(touch pwned); `x`"
    r = _bash(preambles._CLUSTER, preambles.CLUSTER_TAG, "export FROM_SNIPPET=yes && ulimit -n 512", *ECHO, odd,
              cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == f"yes {[odd]!r}", r.stderr
    r = _bash(preambles._CLUSTER, preambles.CLUSTER_TAG, "false", *ECHO, cwd=tmp_path)
    assert r.returncode == 1 and r.stdout == "" and "default_bash_preamble failed" in r.stderr
    assert not (tmp_path / "pwned").exists()


def test_a_missing_setup_script_warns_and_starts_the_worker_as_srtctl(tmp_path):
    r = _bash(preambles._SETUP, preambles.SETUP_TAG, "no-such-rcl-script.sh", *ECHO, "a b", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "None ['a b']"
    assert "WARNING: /configs/no-such-rcl-script.sh or /configs/patches/no-such-rcl-script.sh not found" in r.stderr


@pytest.mark.parametrize("key", ["bash_preamble", "configs_dir"])
def test_a_recipe_cannot_set_the_site_only_keys(key):
    with pytest.raises(RecipeError) as e:
        load_text(RECIPE + f"reconcile: {{{key}: 'touch /tmp/x'}}\n", "r.yaml", None, preflight=False)
    assert e.value.key == f"reconcile.{key}" and "cluster config only" in str(e.value)
