"""reconcile.gateway.allocation: the recipe key, the job's argv and script, and the agent that is
its batch step (run here with the real nginx, no Slurm: what reaches it through Slurm is a signal)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from harness import _ranges
from helpers import wait_until
from reconciler.errors import RecipeError
from reconciler.desired.admission import load_text
from reconciler.gateway import GatewayConfig, render
from reconciler.recipe.cluster import Cluster, ClusterConfig
from reconciler.shell.bindcheck import bind_free
from reconciler.shell.gateway import facts, nginx_binary
from reconciler.shell.gateway_job import Job, Placement, batch_script, parse_jobs, placement, sbatch_argv, served_by

BASE = """\
name: r
model: {path: m}
resources: {gpus_per_node: 8}
engine: {type: mocker}
roles: {agg: {workers: 1, gpus: 1}}
frontend: {type: builtin}
"""


def recipe(extra: str = "", cluster: Cluster | None = None):
    return load_text(BASE + extra, "r.yaml", cluster=cluster).recipe


def test_the_allocation_and_where_it_takes_its_partition():
    r = recipe("slurm: {partition: gpu, account: acct}\n"
               "reconcile: {gateway: {allocation: {node: login-gw1, time: '7-00:00:00'}}}")
    assert placement(r) == Placement("login-gw1", "gpu", "acct", "7-00:00:00")
    r = recipe("slurm: {partition: gpu}\n"
               "reconcile: {gateway: {allocation: {node: n1, partition: cpu, account: ops}}}")
    assert placement(r) == Placement("n1", "cpu", "ops", None)
    assert placement(recipe()) is None  # next to the reconciler


def test_a_cluster_config_places_every_recipes_gateway_unless_the_recipe_says_otherwise():
    c = Cluster("srtslurm.yaml", ClusterConfig.model_validate({"default_gateway_allocation": {"node": "gw1"}}))
    assert placement(recipe("", c)) == Placement("gw1")
    assert placement(recipe("reconcile: {gateway: {allocation: {node: gw2}}}", c)).node == "gw2"
    assert placement(recipe("reconcile: {gateway: {listen: 127.0.0.1}}", c)) is None  # a listen of its own: here
    assert "default_gateway_allocation" not in c.carried()  # acted on


@pytest.mark.parametrize("extra, where, what", [
    ("reconcile: {gateway: {allocation: {node: 'a b'}}}", "reconcile.gateway.allocation.node", "one Slurm node name"),
    ("reconcile: {gateway: {allocation: {}}}", "reconcile.gateway.allocation.node", ""),
    ("reconcile: {gateway: {allocation: {node: n1, time: soon}}}", "reconcile.gateway.allocation.time", "time limit"),
    ("reconcile: {gateway: {allocation: {node: n1, partition: 'p;q'}}}", "reconcile.gateway.allocation.partition", ""),
    ("reconcile: {gateway: {allocation: {node: n1, gres: 'gpu:1'}}}", "reconcile.gateway.allocation.gres", ""),
    ("reconcile: {gateway: {listen: 127.0.0.1, allocation: {node: n1}}}", "reconcile.gateway", "remove listen"),
    ("reconcile: {gateway: {allocation: {node: n1}}, autoscale: {roles: {agg: {min: 0, max: 2, target: "
     "{waiting_per_worker: 2}}}, scale_to_zero_after_seconds: 60}}", "reconcile", "cannot be used together"),
])
def test_bad_allocations_are_refused_where_they_are(extra, where, what):
    with pytest.raises(RecipeError) as e:
        recipe(extra)
    assert where in str(e.value) and what in str(e.value), str(e.value)


def test_the_jobs_argv_and_its_script_quote_what_they_carry(tmp_path):
    prefix = tmp_path / "st ate$x" / "r" / "gateway"
    text = batch_script("/opt/py thon/bin/python", "/usr/sbin/nginx", prefix, ["/opt/py thon/bin/python", "-m", "h",
                                                                                "--prefix", str(prefix)])
    line = text.splitlines()[-1]
    assert line.startswith("exec ")
    assert shlex.split(line)[1:] == ["/opt/py thon/bin/python", "-m", "reconciler.gateway.agent", "--prefix", str(prefix),
                                     "--nginx", "/usr/sbin/nginx", "--holder", "/opt/py thon/bin/python", "-m", "h",
                                     "--prefix", str(prefix)]
    assert subprocess.run(["sh", "-n"], input=text, text=True).returncode == 0
    argv = sbatch_argv("rcl:o:r:gw", Placement("n1", "cpu", None, "UNLIMITED"), Path("/s/x.sbatch"), Path("/s/job.out"))
    assert "--nodelist=n1" in argv and "--ntasks=1" in argv and "--cpus-per-task=1" in argv
    assert "--partition=cpu" in argv and "--time=UNLIMITED" in argv and not any(a.startswith("--account") for a in argv)
    assert not any("gres" in a or "gpu" in a for a in argv) and argv[-1] == "/s/x.sbatch"


def test_squeues_lines_and_the_health_answer():
    assert parse_jobs("12|RUNNING|n1|None\n13|PENDING||Resources\n\ngarbage\n") == [
        Job("12", "RUNNING", "n1", "None"), Job("13", "PENDING", "", "Resources")]
    assert served_by({"upstreams": ["a:1"], "unproven": False}, ["a:1"], False)
    assert not served_by({"upstreams": ["a:1"], "unproven": True}, ["a:1"], False)
    assert not served_by(None, [], False)


def test_facts_of_a_gateway_job_say_where_it_is_and_whether_it_runs(tmp_path):
    (tmp_path / "r").mkdir()
    rec = {"mode": "job", "host": "n1", "port": 12000, "job": "41", "jobState": "PENDING",
           "lastError": "gateway job 41 is pending on n1 (Resources)"}
    (tmp_path / "r" / "gateway.json").write_text(json.dumps(rec))
    f = facts(tmp_path, "r")
    assert f["url"] == "http://n1:12000" and not f["up"] and "Resources" in f["reason"]
    (tmp_path / "r" / "gateway.json").write_text(json.dumps({**rec, "jobState": "RUNNING", "lastError": None}))
    assert facts(tmp_path, "r")["up"]
    (tmp_path / "r" / "gateway.json").write_text(json.dumps({**rec, "jobState": "RUNNING", "answering": False,
                                                              "probeError": "no answer"}))
    assert not facts(tmp_path, "r")["up"] and "no answer" in facts(tmp_path, "r")["reason"]


def _health(port: int) -> dict | None:
    import urllib.request
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/gateway/health", timeout=1) as r:
            return json.loads(r.read())
    except (OSError, ValueError):
        return None


@pytest.mark.skipif(nginx_binary() is None, reason="nginx not installed (scripts/stacks-install.sh)")
def test_the_agent_reloads_on_hup_restarts_a_dead_nginx_and_quits_gracefully(tmp_path):
    prefix = tmp_path / "gateway"
    prefix.mkdir()
    lo = next(_ranges)  # this test worker's own span
    port = next(p for p in range(lo, lo + 100) if bind_free(p))
    conf = prefix / "nginx.conf"
    conf.write_text(render(GatewayConfig("r", port, prefix, ("127.0.0.1:9",))))
    out = tmp_path / "job.out"  # a file, as the job's --output (a pipe stays open in nginx's workers)
    with open(out, "wb") as f:
        agent = subprocess.Popen([sys.executable, "-m", "reconciler.gateway.agent", "--prefix", str(prefix),
                                  "--nginx", nginx_binary()], stdout=f, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: (_health(port) or {}).get("upstreams") == ["127.0.0.1:9"], timeout=20, what="nginx up")
        conf.write_text(render(GatewayConfig("r", port, prefix, ("127.0.0.1:10",))))
        agent.send_signal(signal.SIGHUP)  # what scancel --batch --signal=HUP delivers
        wait_until(lambda: (_health(port) or {}).get("upstreams") == ["127.0.0.1:10"], timeout=20, what="reloaded")
        master = int((prefix / "nginx.pid").read_text())
        os.kill(master, signal.SIGKILL)
        wait_until(lambda: (p := prefix / "nginx.pid").exists() and p.read_text().strip() != str(master)
                   and _health(port) is not None, timeout=30, what="nginx started again by the agent")
        agent.send_signal(signal.SIGQUIT)  # the recipe deleted
        assert agent.wait(timeout=30) == 0
        wait_until(lambda: bind_free(port), timeout=10, what="the port let go")
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    said = out.read_text()
    assert "nginx exited" in said and "stopping (SIGQUIT)" in said, said
