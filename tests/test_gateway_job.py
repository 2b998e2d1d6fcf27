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
from reconciler.gateway import GatewayConfig, render
from reconciler.recipe.cluster import Cluster, ClusterConfig
from reconciler.shell.gateway.bindcheck import bind_free
from reconciler.shell.gateway.record import facts
from reconciler.shell.gateway.local import nginx_binary
from support.recipes import builtin_one as recipe
from reconciler.shell.gateway.job import GatewayJobs
from reconciler.shell.gateway.job_slurm import (
    Job, Placement, batch_script, parse_jobs, placement, sbatch_argv,
)



def test_the_allocation_and_where_it_takes_its_partition():
    r = recipe("slurm: {partition: gpu, account: acct}\n"
               "reconcile: {gateway: {allocation: {node: login-gw1, time: '7-00:00:00'}}}")
    assert placement(r) == Placement("login-gw1", "gpu", "acct", "7-00:00:00")
    r = recipe("slurm: {partition: gpu}\n"
               "reconcile: {gateway: {allocation: {node: n1, partition: cpu, account: ops}}}")
    assert placement(r) == Placement("n1", "cpu", "ops", None)
    r = recipe("slurm: {reservation: maint}\nsbatch_directives: {qos: high}\n"
               "reconcile: {gateway: {allocation: {node: n1, memory: 256m}}}")
    assert placement(r) == Placement("n1", memory="256M", qos="high", reservation="maint")
    assert placement(recipe()) is None  # next to the reconciler


def test_a_cluster_config_places_every_recipes_gateway_unless_the_recipe_says_otherwise():
    c = Cluster("srtslurm.yaml", ClusterConfig.model_validate({"default_gateway_allocation": {"node": "gw1"}}))
    assert placement(recipe("", c)) == Placement("gw1")
    assert placement(recipe("reconcile: {gateway: {allocation: {node: gw2}}}", c)).node == "gw2"
    assert placement(recipe("reconcile: {gateway: {listen: 127.0.0.1}}", c)) is None  # a listen of its own: here
    assert "default_gateway_allocation" not in c.carried()  # acted on
    # a recipe that scales to zero keeps its gateway here (woken by what its holder holds here)
    zero = ("reconcile: {autoscale: {roles: {agg: {min: 0, max: 2, target: {waiting_per_worker: 2}}}, "
            "scale_to_zero_after_seconds: 60}}")
    assert placement(recipe(zero, c)) is None


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
    assert "--nodelist=n1" in argv and "--ntasks=1" in argv and "--cpus-per-task=1" in argv and "--mem=1G" in argv
    assert not any(a.startswith(("--qos", "--reservation")) for a in argv)
    assert "--partition=cpu" in argv and "--time=UNLIMITED" in argv and not any(a.startswith("--account") for a in argv)
    assert not any("gres" in a or "gpu" in a for a in argv) and argv[-1] == "/s/x.sbatch"
    argv = sbatch_argv("x", Placement("n1", memory="256M", qos="low", reservation="maint"), Path("/s"), Path("/o"))
    assert {"--mem=256M", "--qos=low", "--reservation=maint"} <= set(argv)


def test_squeues_lines():
    assert parse_jobs("12|RUNNING|n1|None\n13|PENDING||Resources\n\ngarbage\n") == [
        Job("12", "RUNNING", "n1", "None"), Job("13", "PENDING", "", "Resources")]


def test_facts_of_a_gateway_job_say_where_it_is_and_whether_it_runs(tmp_path):
    (tmp_path / "r").mkdir()
    rec = {"mode": "job", "host": "n1", "port": 12000, "job": "41", "jobState": "PENDING",
           "lastError": "gateway job 41 is pending on n1 (Resources)"}
    (tmp_path / "r" / "gateway.json").write_text(json.dumps(rec))
    f = facts(tmp_path, "r")
    assert f["url"] == "http://n1:12000" and not f["up"] and "Resources" in f["reason"]
    (tmp_path / "r" / "gateway.json").write_text(json.dumps({**rec, "jobState": "RUNNING", "lastError": None}))
    assert not facts(tmp_path, "r")["up"]  # running, never confirmed serving: not up yet
    rec = {**rec, "confirmedJob": "41"}
    (tmp_path / "r" / "gateway.json").write_text(json.dumps({**rec, "jobState": "RUNNING", "lastError": None}))
    assert facts(tmp_path, "r")["up"]
    (tmp_path / "r" / "gateway.json").write_text(json.dumps({**rec, "jobState": "RUNNING", "answering": False,
                                                              "probeError": "no answer"}))
    assert not facts(tmp_path, "r")["up"] and "no answer" in facts(tmp_path, "r")["reason"]


def _start_agent(tmp_path: Path, prefix: Path) -> subprocess.Popen:
    """The agent as the job's batch step runs it; its output to a file, as the job's --output (a
    pipe would stay open in nginx's workers)."""
    with open(tmp_path / "job.out", "wb") as f:
        return subprocess.Popen([sys.executable, "-m", "reconciler.gateway.agent", "--prefix", str(prefix),
                                 "--nginx", nginx_binary()], stdout=f, stderr=subprocess.STDOUT)


def _health(port: int) -> dict | None:
    import urllib.request
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/gateway/health", timeout=1) as r:
            return json.loads(r.read())
    except (OSError, ValueError):
        return None


@pytest.mark.needs("nginx")
def test_the_agent_reloads_on_hup_restarts_a_dead_nginx_and_quits_gracefully(tmp_path):
    prefix = tmp_path / "gateway"
    prefix.mkdir()
    lo = next(_ranges)  # this test worker's own span
    port = next(p for p in range(lo, lo + 100) if bind_free(p))
    conf = prefix / "nginx.conf"
    conf.write_text(render(GatewayConfig("r", port, prefix, ("127.0.0.1:9",))))
    agent = _start_agent(tmp_path, prefix)
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
    said = (tmp_path / "job.out").read_text()
    assert "nginx exited" in said and "stopping (SIGQUIT)" in said, said


# ---------------------------------------------------------------- the reconciler side, on a fake Slurm


class FakeSlurm:
    """squeue/sbatch/scancel as an in-memory queue; ``health`` is what the node's nginx answers."""

    owner, user = "o", "u"

    def __init__(self):
        self.jobs: dict[str, list[str]] = {}  # id -> [state, node, reason]
        self.calls: list[list[str]] = []
        self.ended: dict[str, tuple[str, str]] = {}
        self.next_id = 100
        self.fail_scancel = False

    def slurm(self, argv, check=True, verb=None):
        import subprocess as sp
        self.calls.append(argv)
        out, rc, err = "", 0, ""
        if argv[0] == "squeue":
            out = "".join(f"{j}|{st}|{node}|{why}\n" for j, (st, node, why) in self.jobs.items())
        elif argv[0] == "sbatch":
            self.next_id += 1
            out = f"{self.next_id}\n"
            node = next(a.split("=", 1)[1] for a in argv if a.startswith("--nodelist="))
            self.jobs[str(self.next_id)] = ["PENDING", "", "None"]
            self.last_node = node
        elif argv[0] == "scancel":
            rc, err = (1, "scancel: error: Socket timed out") if self.fail_scancel else (0, "")
        return sp.CompletedProcess(argv, rc, out, err)

    def job_end(self, job_id):
        return self.ended.get(job_id)

    def verbs(self):
        return [" ".join(a[:3]) if a[0] == "scancel" else a[0] for a in self.calls]


@pytest.fixture
def gw(tmp_path, monkeypatch):
    from reconciler.core.ports import NodePortAllocator
    from reconciler.drivers.state import StateDir

    slurm = FakeSlurm()
    jobs = GatewayJobs(StateDir(tmp_path), slurm, "/usr/sbin/nginx", "/py")
    answer: dict = {}
    monkeypatch.setattr(jobs, "_health", lambda rec: answer.get("health"))
    ports = NodePortAllocator()
    ports.set_range(30000, 30100)
    return jobs, slurm, answer, ports


def _sync(jobs, ports, now, ups=("n1:8000",)):
    return [c.kind for c in jobs.sync("r", list(ups), ports, now, Placement("n3"), hold=10.0)]


def _rec(jobs):
    return jobs._record("r")


def _page(jobs, ups, unproven=False, recipe="r"):
    """The job's /gateway/health for these upstreams, as nginx would answer it."""
    from reconciler.gateway import GatewayConfig, instance, version
    rec = _rec(jobs)
    prefix = jobs.state.root.absolute() / recipe / "gateway"
    cfg = GatewayConfig("r", rec["port"], prefix, tuple(ups), unproven, "0.0.0.0", rec["holderPort"])
    return {"version": version(cfg), "instance": instance(recipe, prefix)}


def _serving(jobs, slurm, answer, ports) -> None:
    """Job 101 submitted, running and confirmed serving n1:8000 (GatewayStarted said)."""
    _sync(jobs, ports, 0.0)
    slurm.jobs["101"] = ["RUNNING", "n3", "None"]
    answer["health"] = _page(jobs, ["n1:8000"])
    assert _sync(jobs, ports, 1.0) == ["GatewayStarted"]


def _hups(slurm):
    return slurm.verbs().count("scancel --batch --signal=HUP")


def test_a_gateway_job_from_submit_to_serving_each_pass_one_look(gw):
    jobs, slurm, answer, ports = gw
    assert _sync(jobs, ports, 0.0) == ["GatewaySubmitted"]
    rec = _rec(jobs)
    assert rec["mode"] == "job" and rec["host"] == "n3" and rec["job"] == "101" and rec["notBefore"] == 0.25
    assert ports.claim("n3", "other/x", "p", rec["port"]) is False  # the node's port is the gateway's
    slurm.jobs["101"] = ["PENDING", "", "Resources"]
    assert _sync(jobs, ports, 1.0) == ["GatewayWaiting"]
    assert _rec(jobs)["notBefore"] == 6.0  # Slurm says why: looked at at the resync's pace
    slurm.jobs["101"] = ["PENDING", "", "Priority"]
    assert _sync(jobs, ports, 2.0) == []  # said once per job and state, though the reason flips
    slurm.jobs["101"] = ["RUNNING", "n3", "None"]
    assert _sync(jobs, ports, 3.0) == []  # nginx not up yet: no HUP, looked at again soon
    assert _hups(slurm) == 0 and _rec(jobs)["notBefore"] == 3.25 and _rec(jobs)["lastError"] is None
    assert not facts(jobs.state.root, "r")["up"]  # running, not serving yet
    answer["health"] = _page(jobs, ["n1:8000"])
    assert _sync(jobs, ports, 3.5) == ["GatewayStarted"]
    assert _rec(jobs)["upstreams"] == ["n1:8000"] and _rec(jobs)["notBefore"] is None
    assert facts(jobs.state.root, "r")["up"]
    looks = slurm.verbs().count("squeue")
    assert _sync(jobs, ports, 4.0) == [] and slurm.verbs().count("squeue") == looks + 1  # settled: one squeue
    # a new upstream: one HUP, confirmed on a later pass, not waited for
    assert _sync(jobs, ports, 5.0, ("n1:8000", "n2:8000")) == [] and _hups(slurm) == 1
    assert _sync(jobs, ports, 5.25, ("n1:8000", "n2:8000")) == [] and _hups(slurm) == 1  # once in LOOK_LATER_S
    answer["health"] = _page(jobs, ["n1:8000", "n2:8000"])
    assert _sync(jobs, ports, 5.3, ("n1:8000", "n2:8000")) == []  # an old worker may still answer: not yet
    assert _sync(jobs, ports, 5.5, ("n1:8000", "n2:8000")) == ["GatewayReloaded"]
    # the list changes and changes back before nginx took the first change: what it serves after
    # that HUP is asked again, never taken for the list confirmed before
    assert _sync(jobs, ports, 6.0, ("n1:8000",)) == [] and _hups(slurm) == 2
    answer["health"] = _page(jobs, ["n1:8000"])
    assert _sync(jobs, ports, 6.6, ("n1:8000", "n2:8000")) == [] and _hups(slurm) == 3  # the one between: again
    answer["health"] = _page(jobs, ["n1:8000", "n2:8000"])
    assert _sync(jobs, ports, 7.2, ("n1:8000", "n2:8000")) == ["GatewayReloaded"]
    # settled, then something else answers there: found at the next look (every RECHECK_S)
    answer["health"] = _page(jobs, ["n1:8000"])
    assert _sync(jobs, ports, 8.0, ("n1:8000", "n2:8000")) == []  # not looked at yet
    assert _sync(jobs, ports, 40.0, ("n1:8000", "n2:8000")) == [] and _hups(slurm) == 4
    # a config that is never served: said once, after the grace, with what the agent said
    assert _sync(jobs, ports, 51.0, ("n1:8000", "n2:8000")) == ["GatewayFailed"]
    assert _sync(jobs, ports, 52.0, ("n1:8000", "n2:8000")) == [] and _rec(jobs)["notBefore"] == 57.0


def test_a_new_job_is_looked_at_soon_and_a_job_that_never_serves_is_said(gw):
    jobs, slurm, answer, ports = gw
    _sync(jobs, ports, 0.0)
    slurm.jobs["101"] = ["RUNNING", "n3", "None"]
    assert _sync(jobs, ports, 1.0) == []
    assert _sync(jobs, ports, 12.0) == ["GatewayFailed"]  # nginx or the interpreter missing on the node
    assert "does not serve its config" in _rec(jobs)["lastError"]
    assert _sync(jobs, ports, 13.0) == []
    del slurm.jobs["101"]
    slurm.ended["101"] = ("FAILED", "NonZeroExitCode")
    assert _sync(jobs, ports, 14.0) == ["GatewayFailed", "GatewaySubmitted"]
    slurm.jobs["102"] = ["RUNNING", "n3", "None"]
    assert _sync(jobs, ports, 15.0) == [] and _rec(jobs)["notBefore"] == 15.25  # a new job: looked at soon
    answer["health"] = _page(jobs, ["n1:8000"])
    assert _sync(jobs, ports, 15.25) == ["GatewayStarted"]


def test_an_ended_gateway_job_is_submitted_again_with_a_backoff_unless_slurm_still_has_it(gw):
    jobs, slurm, answer, ports = gw
    _sync(jobs, ports, 0.0)
    slurm.jobs["101"] = ["RUNNING", "n3", "None"]
    _sync(jobs, ports, 0.5)
    del slurm.jobs["101"]
    slurm.ended["101"] = ("RUNNING", "None")  # squeue missed it: Slurm still runs it
    assert _sync(jobs, ports, 1.0) == [] and slurm.verbs().count("sbatch") == 1
    del slurm.ended["101"]  # nor can scontrol say (a timeout): not taken as ended for MISSING_S
    assert _sync(jobs, ports, 20.0) == [] and slurm.verbs().count("sbatch") == 1
    slurm.ended["101"] = ("CANCELLED", "None")
    assert _sync(jobs, ports, 21.0) == ["GatewayFailed", "GatewaySubmitted"]  # the first again at once
    del slurm.jobs["102"]
    slurm.ended["102"] = ("FAILED", "NonZeroExitCode")
    assert _sync(jobs, ports, 22.0) == ["GatewayFailed"]  # then after 1 s
    assert _sync(jobs, ports, 23.0) == ["GatewaySubmitted"]
    assert _rec(jobs)["job"] == "103" and _rec(jobs)["backoff"] == 2


def test_a_serving_job_is_kept_over_a_waiting_one(gw):
    jobs, slurm, answer, ports = gw
    _sync(jobs, ports, 0.0)
    slurm.jobs["101"] = ["RUNNING", "n3", "None"]
    answer["health"] = _page(jobs, ["n1:8000"])
    _sync(jobs, ports, 1.0)
    slurm.jobs["102"] = ["PENDING", "", "Resources"]  # a second one (a submit whose answer was lost)
    jobs._write("r", {**_rec(jobs), "job": "102"})
    _sync(jobs, ports, 2.0)
    assert "scancel 102" in slurm.verbs() and "scancel --batch --signal=QUIT" not in slurm.verbs()
    assert _rec(jobs)["job"] == "101"


def test_a_port_another_process_holds_on_the_node(gw):
    jobs, slurm, answer, ports = gw
    _sync(jobs, ports, 0.0)
    slurm.jobs["101"] = ["RUNNING", "n3", "None"]
    prefix = jobs.state.root.absolute() / "r" / "gateway"
    first = _rec(jobs)["port"]
    (prefix / "agent.json").write_text(json.dumps({"job": "101", "nginxPid": 7, "lastExit": 1, "bindFailed": True,
                                                   "error": "still could not bind()"}))
    # it never served there: a new port, in a new job (its holder knows the gateway's port)
    assert _sync(jobs, ports, 1.0) == ["GatewayMoved"]
    assert _rec(jobs)["port"] != first and "scancel --batch --signal=QUIT" in slurm.verbs()
    assert _sync(jobs, ports, 2.0) == ["GatewaySubmitted"]
    # another reconciler's gateway answers on our port: not ours, whatever it serves
    slurm.jobs["102"] = ["RUNNING", "n3", "None"]
    answer["health"] = _page(jobs, ["n1:8000"], recipe="someone-else")
    second = _rec(jobs)["port"]
    assert _sync(jobs, ports, 3.0) == ["GatewayMoved"] and _rec(jobs)["port"] != second
    assert _hups(slurm) == 0  # never told to reload someone else's nginx
    # once it served on a port, the address is kept and the cause said
    assert _sync(jobs, ports, 4.0) == ["GatewaySubmitted"]
    slurm.jobs["103"] = ["RUNNING", "n3", "None"]
    answer["health"] = _page(jobs, ["n1:8000"])
    assert _sync(jobs, ports, 5.0) == ["GatewayStarted"]
    kept = _rec(jobs)["port"]
    answer["health"] = None
    (prefix / "agent.json").write_text(json.dumps({"job": "103", "nginxPid": None, "lastExit": 1, "bindFailed": True}))
    assert _sync(jobs, ports, 40.0) == []
    assert _sync(jobs, ports, 51.0) == ["GatewayFailed"]
    assert "held by another process" in _rec(jobs)["lastError"] and _rec(jobs)["port"] == kept


def test_ports_the_registry_gives_another_owner_move_a_gateway_that_never_served(gw):
    jobs, slurm, answer, ports = gw
    _sync(jobs, ports, 0.0)
    rec = _rec(jobs)
    ports.release("r/gateway")
    assert ports.claim("n3", "w/agg_0", "http", rec["port"])  # a worker got it meanwhile
    assert _sync(jobs, ports, 1.0) == ["GatewayMoved", "GatewaySubmitted"]
    assert _rec(jobs)["port"] != rec["port"] and "scancel 101" in slurm.verbs()


def test_a_stop_that_slurm_did_not_take_is_tried_again(gw):
    jobs, slurm, answer, ports = gw
    _sync(jobs, ports, 0.0)
    slurm.jobs["101"] = ["RUNNING", "n3", "None"]
    slurm.fail_scancel = True
    assert [c.kind for c in jobs.stop("r", ports)] == ["GatewayFailed"]
    assert _rec(jobs)["job"] == "101"  # kept: known, so stopped again next pass
    slurm.fail_scancel = False
    assert [c.kind for c in jobs.stop("r", ports)] == ["GatewayStopped"]
    assert not jobs.state.root.joinpath("r", "gateway.json").exists()
    assert jobs._find("r") == []  # retired: never adopted again, though its nginx finishes its requests


def test_ports_are_given_up_only_once_the_job_started_with_them_was_told(gw):
    """A scancel that fails while the gateway's ports move (a registry conflict, a port held):
    the ports stay, and the job is told again next pass, not adopted and not moved every pass."""
    jobs, slurm, answer, ports = gw
    _sync(jobs, ports, 0.0)
    slurm.jobs["101"] = ["RUNNING", "n3", "None"]
    rec = _rec(jobs)
    ports.release("r/gateway")
    assert ports.claim("n3", "w/agg_0", "http", rec["port"])
    slurm.fail_scancel = True
    assert _sync(jobs, ports, 1.0) == [] and _rec(jobs)["port"] == rec["port"] and _rec(jobs)["job"] == "101"
    slurm.fail_scancel = False
    assert _sync(jobs, ports, 2.0) == ["GatewayMoved", "GatewaySubmitted"] and _rec(jobs)["port"] != rec["port"]
    # a port held on the node, while scancel fails: no port burned, no event, until it is told
    slurm.jobs["102"] = ["RUNNING", "n3", "None"]
    prefix = jobs.state.root.absolute() / "r" / "gateway"
    (prefix / "agent.json").write_text(json.dumps({"job": "102", "bindFailed": True}))
    slurm.fail_scancel = True
    port = _rec(jobs)["port"]
    assert [_sync(jobs, ports, t) for t in (3.0, 3.25, 3.5)] == [[], [], []] and _rec(jobs)["port"] == port
    slurm.fail_scancel = False
    assert _sync(jobs, ports, 3.75) == ["GatewayMoved"] and _rec(jobs)["port"] != port


def test_a_delete_tells_the_recorded_job_though_squeue_missed_it(gw):
    jobs, slurm, answer, ports = gw
    _serving(jobs, slurm, answer, ports)
    del slurm.jobs["101"]  # one squeue that does not list it
    assert [c.kind for c in jobs.stop("r", ports)] == ["GatewayStopped"]
    assert ["scancel", "--batch", "--signal=QUIT", "101"] in slurm.calls


def test_a_settled_gateways_missed_look_is_the_probes_not_a_reload(gw):
    jobs, slurm, answer, ports = gw
    _serving(jobs, slurm, answer, ports)
    answer["health"] = None  # one look times out
    assert _sync(jobs, ports, 40.0) == []
    answer["health"] = _page(jobs, ["n1:8000"])
    assert _sync(jobs, ports, 40.25) == [] and _sync(jobs, ports, 80.0) == [] and _hups(slurm) == 0


def test_a_new_job_is_probed_once_it_served_not_while_it_starts(gw, monkeypatch):
    from reconciler.shell.readiness import probe
    from reconciler.shell.gateway import answering
    jobs, slurm, answer, ports = gw
    monkeypatch.setattr(probe, "fetch_all", lambda urls: {u: answer.get("page") for u in urls})
    gateway_probe = answering.GatewayProbe()  # this test's own pace
    _sync(jobs, ports, 0.0)
    slurm.jobs["101"] = ["RUNNING", "n3", "None"]
    said = []
    for t in (1.0, 2.0, 3.0):
        _sync(jobs, ports, t)
        said += [c.kind for c in gateway_probe.probe(jobs.state, ["r"], t)]
    assert facts(jobs.state.root, "r")["reason"] == "gateway job 101 is starting on n3 (not serving yet)"
    answer["health"] = _page(jobs, ["n1:8000"])
    answer["page"] = json.dumps(answer["health"])
    assert _sync(jobs, ports, 4.0) == ["GatewayStarted"]
    said += [c.kind for c in gateway_probe.probe(jobs.state, ["r"], 4.0)]
    answer["page"] = json.dumps(_page(jobs, ["n1:8000"], recipe="someone-else"))  # another's page: no answer
    for t in (5.0, 6.0):
        said += [c.kind for c in gateway_probe.probe(jobs.state, ["r"], t)]
    assert said == ["GatewayNotAnswering"]


def test_a_job_id_slurm_hands_out_again_is_not_a_retired_one(gw):
    jobs, slurm, answer, ports = gw
    prefix = jobs.state.root.absolute() / "r" / "gateway"
    prefix.mkdir(parents=True)
    (prefix / "retired.json").write_text(json.dumps(["101"]))
    assert _sync(jobs, ports, 0.0) == ["GatewaySubmitted"] and _rec(jobs)["job"] == "101"
    slurm.jobs["101"] = ["RUNNING", "n3", "None"]
    answer["health"] = _page(jobs, ["n1:8000"])
    assert _sync(jobs, ports, 1.0) == ["GatewayStarted"]


def test_a_due_time_no_pass_acts_on_does_not_spin_the_loop(tmp_path):
    from reconciler.drivers.state import StateDir
    from reconciler.shell.gateway.host import Gateways

    g = Gateways(StateDir(tmp_path), nginx="/usr/sbin/nginx")
    (tmp_path / "r").mkdir()
    g._write("r", {"mode": "job", "notBefore": 100.25})
    assert g.next_due(100.0) == 0.25
    assert g.next_due(500.0) is None  # its recipe suspended or held: nothing acts on it


def test_under_the_local_driver_an_allocation_is_said_and_nothing_else_is_touched(tmp_path):
    from reconciler.core.ports import NodePortAllocator
    from reconciler.drivers.state import StateDir

    jobs = GatewayJobs(StateDir(tmp_path), object(), None)
    changes = jobs.sync("r", [], NodePortAllocator(), 0.0, Placement("n1"))
    assert [c.kind for c in changes] == ["GatewayFailed"] and "Slurm driver" in changes[0].message
    assert "mode" not in jobs._record("r")  # not taken for a job's record (a later local gateway is not)


@pytest.mark.needs("nginx")
def test_an_agent_killed_takes_its_nginx_along(tmp_path):
    """SIGKILL (the OOM killer) gives the agent no chance to stop its children: they are told by
    the kernel (PR_SET_PDEATHSIG), so no nginx keeps serving outside the job, holding the port."""
    prefix = tmp_path / "gateway"
    prefix.mkdir()
    lo = next(_ranges)
    port = next(p for p in range(lo, lo + 100) if bind_free(p))
    (prefix / "nginx.conf").write_text(render(GatewayConfig("r", port, prefix, ("127.0.0.1:9",))))
    agent = _start_agent(tmp_path, prefix)
    try:
        wait_until(lambda: _health(port) is not None, timeout=20, what="nginx up")
        status = json.loads((prefix / "agent.json").read_text())
        assert status["nginxPid"] == int((prefix / "nginx.pid").read_text())
        agent.kill()
        agent.wait()
        wait_until(lambda: bind_free(port), timeout=20, what="nginx gone with its agent")
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()


@pytest.mark.needs("nginx")
def test_the_agent_says_when_its_port_is_held_and_when_it_got_it(tmp_path):
    """nginx tries to bind 5 times, 0.5 s apart, then exits with "still could not bind()": the
    agent reads its own run's lines of error.log and says bindFailed in agent.json; once the port
    is free, the nginx it starts again binds, and past its retries the agent says it settled."""
    import socket

    prefix = tmp_path / "gateway"
    prefix.mkdir()
    (prefix / "error.log").write_text("2026/01/01 00:00:00 [emerg] 1#1: an old job's line\n")
    lo = next(_ranges)
    port = next(p for p in range(lo, lo + 100) if bind_free(p))
    (prefix / "nginx.conf").write_text(render(GatewayConfig("r", port, prefix, ("127.0.0.1:9",))))
    squatter = socket.socket()
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    squatter.bind(("0.0.0.0", port))
    squatter.listen()
    status = prefix / "agent.json"
    agent = _start_agent(tmp_path, prefix)
    try:
        held = wait_until(lambda: (d := json.loads(status.read_text())).get("bindFailed") and d, timeout=30,
                          what="the agent saying the port is held")
        assert "could not bind" in held["error"] or "Address already in use" in held["error"], held
        squatter.close()
        settled = wait_until(lambda: (d := json.loads(status.read_text())).get("settled") and d, timeout=40,
                             what="nginx bound and settled")
        assert settled["bindFailed"] is False and settled["nginxPid"] and _health(port) is not None
    finally:
        squatter.close()
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=30)
