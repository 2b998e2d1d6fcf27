"""The seed hooks process_exporter_groups and nvtx_environment, through their callers.

``process_exporter_groups``: ``reconciler render --process-exporter`` writes a process
exporter's group file (first match wins). Checked against the argv the reconciler itself
renders: every worker process lands in its own engine's group, the Dynamo frontend in
``frontend``. ``nvtx_environment``: the workers' environment under srtctl's automatic nsys
preset (``observability.enabled``), below the recipe's and the role's own.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from reconciler.backends import BACKENDS
from reconciler.desired.exporters import config_text
from reconciler.desired.admission import load_text
from reconciler.desired.render import render_units
from reconciler.backends.registry import backend_for

ROOT = Path(__file__).resolve().parents[1]
HOST = "reconcile: {container_runtime: none}\n"  # no container: argv is the process's own, no install preamble

RECIPES = {
    "vllm": "engine: {type: vllm}\nfrontend: {type: dynamo}\nroles: {agg: {workers: 1, gpus: 1}}\n",
    "vllm-serve": "engine: {type: vllm}\nfrontend: {type: vllm-router}\nroles: {agg: {workers: 1, gpus: 1}}\n",
    "sglang": "engine: {type: sglang}\nfrontend: {type: dynamo}\nroles: {prefill: {workers: 1, gpus: 1}, "
              "decode: {workers: 1, gpus: 1}}\n",
    "sglang-server": "engine: {type: sglang}\nfrontend: {type: sglang-router}\nroles: {agg: {workers: 1, gpus: 1}}\n",
    "trtllm": "engine: {type: trtllm}\nfrontend: {type: dynamo}\nroles: {prefill: {workers: 1, gpus: 2}, "
              "decode: {workers: 1, gpus: 2}}\n",
    "mocker": "engine: {type: mocker}\nfrontend: {type: dynamo}\nroles: {agg: {workers: 1, gpus: 1}}\n",
    "tokenspeed": "engine: {type: tokenspeed}\nfrontend: {type: sglang-router}\nroles: {agg: {workers: 1, gpus: 1}}\n",
    "atom": "engine: {type: atom}\nfrontend: {type: atomesh}\nroles: {agg: {workers: 1, gpus: 1}}\n",
}


def recipe(body: str, name: str = "h"):
    text = f"name: {name}\nmodel: {{path: /m}}\nresources: {{gpus_per_node: 8}}\n" + HOST + body
    return load_text(text, f"{name}.yaml", preflight=False).recipe


def first_match(groups: list[dict], argv: tuple[str, ...]) -> str | None:
    line = " ".join(argv)
    comm = Path(argv[0]).name[:15]
    for g in groups:
        if g.get("cmdline") and all(re.search(p, line) for p in g["cmdline"]):
            return g["name"]
        if comm in g.get("comm", ()):
            return g["name"]
    return None


@pytest.mark.parametrize("which", RECIPES)
def test_every_rendered_process_lands_in_its_own_group(which, tmp_path):
    r = recipe(RECIPES[which])
    doc = yaml.safe_load(config_text(r))
    groups = doc["process_names"]
    names = [g["name"] for g in groups]
    assert names[0] == "frontend" and len(names) == len(set(names))
    own = {g.name for m, _ in r.roles.items() for g in backend_for(r, m).process_exporter_groups}
    assert own and own <= set(names)
    for u in render_units(r, None, tmp_path):
        for l in u.launches:
            got = first_match(groups, l.argv)
            if u.role in ("prefill", "decode", "agg"):
                assert got in own, (which, u.name, got, l.argv)
            elif u.role == "frontend" and r.frontend.type == "dynamo":
                assert got == "frontend", l.argv
            elif u.role == "svc-etcd":  # its wrapper execs etcd after making a fresh data directory
                assert first_match(groups, l.argv[l.argv.index("etcd"):]) == "etcd"


def test_trtllm_s_launcher_is_matched_before_the_module_it_wraps(tmp_path):
    r = recipe(RECIPES["trtllm"])
    groups = yaml.safe_load(config_text(r))["process_names"]
    u = next(u for u in render_units(r, None, tmp_path) if u.role == "decode")
    assert first_match(groups, u.launches[0].argv) == "trtllm_llmapi_launch"
    assert first_match(groups, ("python3", "-m", "dynamo.trtllm", "--model-path", "/m")) == "dynamo_trtllm"
    assert first_match(groups, ("VLLM::EngineCore",)) is None  # only the engines the recipe runs


def test_per_role_engines_each_bring_their_groups():
    from conftest import CORPUS as corpus
    f = corpus / "srt-slurm-v2" / "tilert" / "glm5-disagg.yaml"
    if not f.exists():
        pytest.fail(f"corpus example missing: {f} (set RECONCILER_CORPUS)")
    r = load_text(f.read_text(), str(f), preflight=False).recipe
    names = [g["name"] for g in yaml.safe_load(config_text(r))["process_names"]]
    assert "tilert_decode" in names and "vllm_serve" in names


def test_every_engine_declares_its_groups():
    """Each engine's groups are ones a process exporter can use (a unique name, and compiling
    cmdline regexes or comm names), and each engine is among RECIPES or the tilert example, so
    its groups are checked above against the argv the reconciler renders for it."""
    seen: set[str] = set()
    for engine, cls in BACKENDS.items():
        assert cls.process_exporter_groups, engine
        for g in cls.process_exporter_groups:
            assert g.name and g.name not in seen and (g.cmdline or g.comm), (engine, g)
            seen.add(g.name)
            for pattern in g.cmdline:
                re.compile(pattern)
    checked = {recipe(body).engine.type for body in RECIPES.values()} | {"tilert"}
    assert set(BACKENDS) <= checked, f"engines whose groups no test matches to a rendered argv: {set(BACKENDS) - checked}"


def test_render_prints_the_group_file(tmp_path):
    f = tmp_path / "h.yaml"
    f.write_text(f"name: h\nmodel: {{path: /m}}\nresources: {{gpus_per_node: 8}}\n{RECIPES['sglang']}")
    run = [sys.executable, "-m", "reconciler.cli", "render", str(f), "--state", str(tmp_path / "s")]
    out = subprocess.run([*run, "--process-exporter"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0 and out.stdout == config_text(recipe(RECIPES["sglang"]))
    doc = json.loads(subprocess.run([*run, "-o", "json"], capture_output=True, text=True, timeout=60, cwd=ROOT).stdout)
    assert "sglang_scheduler" in doc["process_exporter"]


def env_of(r, tmp_path) -> dict[str, dict[str, str]]:
    return {u.name: dict(u.launches[0].env) for u in render_units(r, None, tmp_path)}


def test_the_nsys_preset_gives_the_workers_their_engine_s_nvtx_environment(tmp_path):
    body = RECIPES["trtllm"].replace("decode: {workers: 1, gpus: 2}", "decode: {workers: 1, gpus: 2, env: "
                                                                     "{TLLM_PROFILE_LOG_RANKS: '0'}}")
    off = env_of(recipe(body), tmp_path)
    assert "TLLM_LLMAPI_ENABLE_NVTX" not in off["prefill_0"]
    on = env_of(recipe(body + "observability: {enabled: true}\n"), tmp_path)
    assert on["prefill_0"]["TLLM_LLMAPI_ENABLE_NVTX"] == "1" and on["prefill_0"]["TLLM_PROFILE_LOG_RANKS"] == "all"
    assert on["decode_0"]["TLLM_PROFILE_LOG_RANKS"] == "0", "the role's own env wins"
    assert "TLLM_LLMAPI_ENABLE_NVTX" not in on["frontend_0"] and "TLLM_LLMAPI_ENABLE_NVTX" not in on["svc-etcd_0"]
    disabled = env_of(recipe(body + "observability: {enabled: true, nsys: {enabled: false}}\n"), tmp_path)
    assert "TLLM_LLMAPI_ENABLE_NVTX" not in disabled["prefill_0"]
    vllm = env_of(recipe(RECIPES["vllm"] + "observability: {enabled: true}\n"), tmp_path)
    assert vllm["agg_0"]["VLLM_NVTX_SCOPES_FOR_PROFILING"] == "1"
    sglang = env_of(recipe(RECIPES["sglang"] + "observability: {enabled: true}\n"), tmp_path)
    assert not any("NVTX" in k for k in sglang["prefill_0"]), "SGLang sets none: it has no NVTX switch in its env"


def test_the_carried_report_says_what_of_observability_is_acted_on():
    lr = load_text("name: h\nmodel: {path: /m}\nresources: {gpus_per_node: 8}\n" + RECIPES["vllm"]
                   + "observability: {enabled: true}\n", "h.yaml", preflight=False)
    assert "NVTX environment" in lr.not_acted_on["observability"]
    lr = load_text("name: h\nmodel: {path: /m}\nresources: {gpus_per_node: 8}\n" + RECIPES["vllm"]
                   + "observability: {enabled: false}\n", "h.yaml", preflight=False)
    assert lr.not_acted_on["observability"] == "srtctl section: validated, not acted on"
