"""Golden renders: real corpus recipes against what srtctl launches for them.

One file per recipe under tests/golden/. The expectations are srtctl's behaviour, written
from its backends and launch code (the file's ``facts`` names them), not captured from our
own output: the argv prefix, flags with their values, flags that must be absent, the
environment and the srun options of each process. ``$name`` stands for the process's port
of that name (ports are ours to choose; srtctl uses fixed bases), ``$leader`` for its
endpoint's first node, ``$ip:leader`` / ``$ip:head`` for the IP of that node (or of the
recipe's first node) on the configured NIC, which the node learns at launch (a file's
``network_interface`` sets the cluster's; reconciler.desired.netaddr). Renders run under
tests/golden/srtslurm.yaml, the site config that resolves the recipes' model and container aliases.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml

from dataclasses import replace

from reconciler.recipe import cluster
from reconciler.backends import dynamo_install
from reconciler.desired import netaddr
from reconciler.desired import preambles
from reconciler.desired.admission import load_file
from reconciler.desired.render import as_rows, render_units

GOLDEN = Path(__file__).parent / "golden"
CASES = sorted(p for p in GOLDEN.glob("*.yaml") if p.name != "srtslurm.yaml")


def test_there_are_goldens_for_every_engine_and_mode():
    docs = [yaml.safe_load(p.read_text()) for p in CASES]
    assert len(docs) >= 15
    assert {d["engine"] for d in docs} >= {"sglang", "vllm", "trtllm", "mocker"}
    assert {m for d in docs for m in d["modes"]} >= {"agg", "disagg", "multi-node", "dp-ep", "mtp"}


def _value(v, row):
    def sub(m):
        name = m.group(2)
        host = {"leader": row["nodes"][0], "head": "node1"}.get(name)
        if m.group(1):
            return netaddr.token(host)
        return host if name == "leader" else str(row["ports"][name])

    return re.sub(r"\$(ip:)?([a-z_]+)", sub, str(v))


PORT = re.compile(r"(?:([A-Za-z0-9_.*-]+):)?(?<![0-9])(2[0-9]{4}|3[01][0-9]{3})(?![0-9])")


def normalised(value: str, row: dict, leader: str) -> str:
    """A rendered string with our choices folded: the endpoint's ports (``row["ports"]``, its
    leader's) as ``$name`` where the leader or rank 0 itself uses them, any other registry port as
    ``$port`` (ports are ours to choose; srtctl's fixed bases are not ours), the interpreter as
    ``$python``. What stays is what srtctl's rules decide."""
    by_port: dict[str, str] = {}
    for name, port in sorted(row["ports"].items()):
        by_port.setdefault(str(port), name)

    def sub(m: re.Match) -> str:
        host, port = m.group(1), m.group(2)
        ours = host == leader if host not in (None, "*", "0.0.0.0") else row["rank"] == 0
        return (f"{host}:" if host else "") + "$" + (by_port.get(port, "port") if ours else "port")

    return PORT.sub(sub, value.replace(sys.executable, "$python"))


def _layers(argv: list[str]) -> dict:
    """The wrappers before the worker's argv, outermost first: {tag: its first argument, "order": [...], "argv": rest}."""
    out: dict = {"order": []}
    while len(argv) > 4 and argv[:2] == ["bash", "-c"] and argv[3] in (preambles.CLUSTER_TAG, netaddr.TAG,
                                                                          preambles.SETUP_TAG):
        tag = argv[3]
        out[tag] = argv[4]
        out["order"].append(tag)
        argv = netaddr.strip(argv) if tag == netaddr.TAG else argv[5:]
    out["argv"] = argv
    assert out["order"] == sorted(out["order"], key=[preambles.CLUSTER_TAG, netaddr.TAG, preambles.SETUP_TAG].index)
    return out


@pytest.mark.parametrize("case", CASES, ids=[p.stem for p in CASES])
def test_render_matches_srtctl(case, corpus):
    doc = yaml.safe_load(case.read_text())
    site = cluster.load(GOLDEN / "srtslurm.yaml")
    update = {**doc.get("cluster_config", {}), **({"network_interface": doc["network_interface"]}
                                                   if doc.get("network_interface") else {})}
    if update:
        site = replace(site, config=site.config.model_copy(update=update))
    loaded = load_file(corpus / doc["recipe"], site)
    lr = next(x for x in loaded if x.recipe.name == doc.get("deployment", x.recipe.name))
    rows = as_rows(render_units(lr.recipe, None, Path("/state")))
    if "processes" in doc:
        workers = [r for r in rows if r["role"] in ("prefill", "decode", "agg")]
        assert len(workers) == doc["processes"], [(r["role"], r["index"], r["rank"]) for r in rows]
    leaders = {(r["role"], r["index"]): r["nodes"][0] for r in rows if r["rank"] == 0}
    for exp in doc["expect"]:
        where = exp["where"]
        matches = [r for r in rows if all(r[k] == v for k, v in where.items())]
        assert len(matches) == 1, f"{where}: {len(matches)} processes"
        row = matches[0]
        ctx = f"{case.name} {where}"
        leader = leaders[(row["role"], row["index"])]
        layers = _layers(row["argv"])
        inner = layers.pop("argv")
        if exp.get("node_addr"):  # the node learns its address on the NIC before anything runs
            assert layers.get(netaddr.TAG) == doc["network_interface"], ctx
        elif not doc.get("network_interface"):
            assert netaddr.TAG not in layers, f"{ctx}: no network_interface, no address wrapper"
        for tag in (preambles.CLUSTER_TAG, preambles.SETUP_TAG):  # srtctl's preamble, in srtctl's order
            key = tag.replace("-", "_")
            if key in exp:
                assert layers.get(tag) == exp[key], f"{ctx}: {tag}"
        argv, script = dynamo_install.strip(inner)
        if "dynamo_install" in exp:  # srtctl's worker preamble: pip-install this Dynamo first, or nothing
            want = exp["dynamo_install"]
            assert (script is not None and f"ai-dynamo=={want}" in script) if want else script is None, ctx
        if "argv_start" in exp:
            assert argv[: len(exp["argv_start"])] == [_value(a, row) for a in exp["argv_start"]], ctx
        for flag, value in (exp.get("options") or {}).items():
            assert flag in argv, f"{ctx}: {flag} missing from {argv}"
            assert argv[argv.index(flag) + 1] == _value(value, row), f"{ctx}: {flag}"
        for flag in exp.get("flags", []):
            assert flag in argv, f"{ctx}: {flag} missing"
        for flag in exp.get("absent", []):
            assert flag not in argv, f"{ctx}: {flag} must not be passed"
        if "exact_argv" in exp:  # the whole command line after the wrappers, nothing more, nothing less
            assert [normalised(a, row, leader) for a in argv] == exp["exact_argv"], ctx
        if "exact_env" in exp:  # the whole environment the launcher sets
            assert {k: normalised(v, row, leader) for k, v in row["env"].items()} == exp["exact_env"], ctx
        for k, v in (exp.get("env") or {}).items():
            assert row["env"].get(k) == _value(v, row), f"{ctx}: env {k}"
        for k in exp.get("env_absent", []):
            assert k not in row["env"], f"{ctx}: env {k} must not be set"
        for k, v in (exp.get("srun") or {}).items():
            assert row["srun_options"].get(k) == _value(v, row), f"{ctx}: srun --{k}"
        for k in ("nodes", "gpus", "ntasks", "mpi", "container"):
            if k in exp:
                assert row[k] == exp[k], f"{ctx}: {k}"


def _combination(recipe) -> tuple[str, str, str]:
    """engine(s) x agg/disagg x single/multi-node: what the exact goldens must cover."""
    engines = "+".join(sorted({recipe.engine_for(m).type for m, _ in recipe.roles.items()}))
    from reconciler.backends import endpoints_of

    multi = any(len(ep.nodes) > 1 for ep in endpoints_of(recipe))
    return engines, "disagg" if recipe.disaggregated else "agg", "multi" if multi else "single"


def test_exact_goldens_cover_every_combination_in_the_corpus(corpus):
    """Every engine x mode x single/multi-node combination some corpus recipe renders has a golden
    that pins its workers' argv and env exactly (and names its combination truthfully)."""
    site = cluster.load(GOLDEN / "srtslurm.yaml")
    present: dict[tuple[str, str, str], str] = {}
    for path in sorted(corpus.glob("srt-slurm-v*/**/*.yaml")):
        try:
            loaded = load_file(path, site)
        except Exception:  # refused recipes render nothing; tests/test_corpus.py accounts for them
            continue
        for lr in loaded:
            try:
                present.setdefault(_combination(lr.recipe), str(path.relative_to(corpus)))
            except Exception:
                continue
    covered = {}
    for case in CASES:
        doc = yaml.safe_load(case.read_text())
        exact = [e for e in doc["expect"] if "exact_argv" in e and "exact_env" in e
                 and e["where"]["role"] in ("prefill", "decode", "agg")]
        if "combo" not in doc or not exact:
            continue
        loaded = load_file(corpus / doc["recipe"], site)
        lr = next(x for x in loaded if x.recipe.name == doc.get("deployment", x.recipe.name))
        assert tuple(doc["combo"]) == _combination(lr.recipe), case.name
        covered[tuple(doc["combo"])] = case.name
    missing = {c: f for c, f in present.items() if c not in covered}
    assert not missing, f"no exact golden for {missing}"
    assert len(covered) >= 12
