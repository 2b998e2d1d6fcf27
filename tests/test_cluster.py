"""The cluster config (srtctl's srtslurm.yaml): found as srtctl finds it, strict, applied before validation."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.recipe import cluster
from reconciler.errors import RecipeError
from reconciler.desired.admission import load_text
from reconciler.desired.render import as_rows, render_units


def workers(units):
    return [u for u in units if u.role in ("prefill", "decode", "agg")]

RECIPE = """\
name: r
model: {path: %s, container: sgl}
engine: sglang
roles: {agg: {workers: 1, gpus: 4, env: {A: "1"}, args: {image: sgl}}}
"""


def _cfg(tmp_path: Path, text: str) -> cluster.Cluster:
    f = tmp_path / "srtslurm.yaml"
    f.write_text(text)
    c = cluster.load(f)
    assert c is not None
    return c


def test_found_by_flag_then_environment_then_this_directory_or_two_above(tmp_path, monkeypatch):
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    monkeypatch.delenv(cluster.ENV_VAR, raising=False)
    assert cluster.find(cwd=deep) is None
    (tmp_path / "srtslurm.yaml").write_text("{}\n")
    assert cluster.find(cwd=deep) == tmp_path / "srtslurm.yaml"  # the grandparent, as srtctl looks
    (deep / "srtslurm.yaml").write_text("{}\n")
    assert cluster.find(cwd=deep) == deep / "srtslurm.yaml"
    monkeypatch.setenv(cluster.ENV_VAR, str(tmp_path / "env.yaml"))
    assert cluster.find(cwd=deep) == tmp_path / "env.yaml"
    assert cluster.find("/x/given.yaml", cwd=deep) == Path("/x/given.yaml")
    with pytest.raises(RecipeError, match="cannot read"):
        cluster.load(cwd=deep)  # named by the environment but missing: an error, not a silent default


def test_unknown_keys_are_errors_with_their_path_not_a_silently_dropped_file(tmp_path):
    with pytest.raises(RecipeError) as ei:
        _cfg(tmp_path, "default_partition: batch\ndefault_container: x\nhost_runtime: {pyton: /v/bin/python}\n")
    assert {p.key for p in ei.value.problems()} == {"default_container", "host_runtime.pyton"}


def test_defaults_fill_what_the_recipe_leaves_unset_and_aliases_resolve(tmp_path):
    models = tmp_path / "models" / "qwen"
    models.mkdir(parents=True)
    c = _cfg(tmp_path, f"default_account: acct\ndefault_partition: batch\ndefault_time_limit: '04:00:00'\n"
                       f"gpus_per_node: 8\nmodel_paths: {{qwen: {models}}}\ncontainers: {{sgl: /img/sglang.sqsh}}\n"
                       "default_mounts: {/data: /data}\ndefault_srun_options: {mem: '0'}\n"
                       "default_sbatch_directives: {exclusive: ''}\n")
    lr = load_text(RECIPE % "qwen" + "slurm: {partition: mine}\n", "r.yaml", c)
    r = lr.recipe
    assert (r.slurm.account, r.slurm.partition, r.slurm.time_limit) == ("acct", "mine", "04:00:00")
    assert r.resources.gpus_per_node == 8 and r.model.path == str(models)
    assert r.model.container == "/img/sglang.sqsh"
    assert r.roles.agg.args == {"image": "sgl"}  # args are the engine's, never rewritten
    assert r.container_mounts == {"/data": "/data"} and r.srun_options == {"mem": "0"}
    assert r.sbatch_directives == {"exclusive": ""}
    assert any("alias 'qwen'" in n for n in lr.notes)
    (u,) = workers(render_units(r, None, tmp_path / "st"))
    (row,) = as_rows([u])
    assert row["argv"][row["argv"].index("--model-path") + 1] == "/model"
    assert row["srun_options"]["container-mounts"].startswith(f"{models}:/model,")


def test_model_paths_may_name_a_hugging_face_id_and_a_missing_local_path_is_located(tmp_path):
    c = _cfg(tmp_path, "model_paths: {llama: 'hf:meta-llama/Llama-3.1-8B', gone: /nowhere/at/all}\n")
    r = load_text(RECIPE % "llama", "r.yaml", c).recipe
    (row,) = as_rows(workers(render_units(r, None, tmp_path / "st")))
    assert row["argv"][row["argv"].index("--model-path") + 1] == "meta-llama/Llama-3.1-8B"
    with pytest.raises(RecipeError) as ei:
        load_text(RECIPE % "gone", "r.yaml", c)
    assert ei.value.key == "model.path" and ei.value.line == 2 and "/nowhere/at/all" in ei.value.message
    # the mocker needs no weights; preflight: false trusts the compute nodes to have them
    load_text((RECIPE % "gone").replace("engine: sglang", "engine: mocker").replace(
        ", args: {image: sgl}", ""), "r.yaml", c)
    load_text(RECIPE % "gone", "r.yaml", _cfg(tmp_path, "preflight: false\nmodel_paths: {gone: /nowhere}\n"))


def test_host_runtime_runs_engines_without_containers_from_the_given_python(tmp_path):
    c = _cfg(tmp_path, "host_runtime: {python: /opt/dyn/bin/python, env: {PATH: /opt/dyn/bin:/usr/bin}}\n")
    r = load_text(RECIPE % "hf:Qwen/Qwen3-0.6B", "r.yaml", c).recipe
    (row,) = as_rows(workers(render_units(r, None, tmp_path / "st")))
    assert row["container"] is None and "container-mounts" not in row["srun_options"]
    assert row["argv"][:3] == ["/opt/dyn/bin/python", "-m", "dynamo.sglang"]
    assert row["env"]["PATH"] == "/opt/dyn/bin:/usr/bin" and row["env"]["A"] == "1"


def test_visible_devices_env_names_the_variable_that_pins_a_workers_gpus(tmp_path):
    """ROCm clusters (ATOM, TileRT images) set ROCR_VISIBLE_DEVICES; a recipe's own setting wins."""
    c = _cfg(tmp_path, "visible_devices_env: ROCR_VISIBLE_DEVICES\ngpus_per_node: 8\n")
    (row,) = as_rows(workers(render_units(load_text(RECIPE % "/m", "r.yaml", c, preflight=False).recipe, None,
                                          tmp_path / "st")))
    assert row["env"]["ROCR_VISIBLE_DEVICES"] == "0,1,2,3" and "CUDA_VISIBLE_DEVICES" not in row["env"]
    own = RECIPE % "/m" + "reconcile: {visible_devices_env: HIP_VISIBLE_DEVICES}\n"
    (row,) = as_rows(workers(render_units(load_text(own, "r.yaml", c, preflight=False).recipe, None, tmp_path / "st")))
    assert row["env"]["HIP_VISIBLE_DEVICES"] == "0,1,2,3" and "ROCR_VISIBLE_DEVICES" not in row["env"]
    assert "visible_devices_env" not in c.carried()


def test_the_cli_takes_the_cluster_config_and_refuses_a_bad_one_without_a_traceback(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "srtslurm.yaml").write_text(f"default_partition: batch\nmodel_paths: {{m: {tmp_path / 'models'}}}\n"
                                            "network_interface: ib0\ncluster: lab\n")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE % "m")

    def run(*args):
        return subprocess.run([sys.executable, "-m", "reconciler.cli", *args], capture_output=True, text=True,
                              cwd=tmp_path, timeout=60)

    r = run("validate", "-v", str(recipe))  # found in the working directory
    assert r.returncode == 0, r.stdout + r.stderr
    assert "slurm.partition from the cluster config: batch" in r.stdout
    assert "reconcile.network_interface from the cluster config: ib0" in r.stdout
    assert "carried, not acted on: cluster" in r.stderr
    out = json.loads(run("render", "-o", "json", str(recipe)).stdout)
    (agg,) = [p for p in out["processes"] if p["role"] == "agg"]
    assert agg["argv"][agg["argv"].index("--model-path") + 1] == "/model"
    bad = tmp_path / "bad.yaml"
    bad.write_text("default_partiton: batch\n")
    r = run("--cluster-config", str(bad), "validate", str(recipe))
    assert r.returncode == 1 and "default_partiton: unknown key" in r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr


@pytest.mark.parametrize("recipe_slurm, want, note", [
    ("", "1:00:00", "slurm.time_min from the cluster config: 1:00:00"),
    ("slurm: {time_min: '30'}\n", "30", None),  # the recipe's own wins
    ("slurm: {time_limit: '40'}\n", None, "not used: longer than the recipe's time limit 40"),
    ("slurm: {time_limit: '2:00:00'}\n", "1:00:00", "slurm.time_min from the cluster config: 1:00:00"),
])
def test_the_cluster_default_time_min(tmp_path, recipe_slurm, want, note):
    c = _cfg(tmp_path, "default_time_min: '1:00:00'\n")
    lr = load_text(RECIPE % "m" + recipe_slurm, "r.yaml", c)
    assert lr.recipe.slurm.time_min == want
    assert note is None or any(note in n for n in lr.notes), lr.notes
