"""Issue 46 items 5 and 6 on the real Slurm (single node, mocker engine): a launch srun refuses for
the recipe's or the cluster config's own reason is a ConfigError in srun's words and never
quarantines the node; the cluster config (srtslurm.yaml) is watched like the manifests while
`run` runs: a rewrite is put in force, an invalid one refused with a located error, the old kept."""

from __future__ import annotations

import json

import pytest

from harness import Harness
from helpers import free_port, get, wait_until
from load import scaled
from support.recipes import KEEP

pytestmark = pytest.mark.slurm

REFUSED = "srun: unrecognized option '--container-mounts=/tmp:/tmp'"  # this Slurm has no pyxis


@pytest.fixture
def h(tmp_path):
    """The real single-node Slurm only: srun's refusal is the point."""
    harness = Harness(tmp_path, "slurm")
    yield harness
    harness.cleanup()


def events(h) -> list[dict]:
    try:
        return [json.loads(l) for l in (h.state / "events.jsonl").read_text().splitlines()]
    except FileNotFoundError:
        return []


def status(h, name: str) -> dict:
    return json.loads((h.state / name / "status.json").read_text())


def quarantined(h) -> dict:
    try:
        return json.loads((h.state / "quarantine.json").read_text()).get("quarantined", {})
    except FileNotFoundError:
        return {}


def failed_launches(h, name: str) -> int:
    return sum(e.get("count", 1) for e in events(h) if e["kind"] == "LaunchFailed" and e["recipe"] == name)


def test_a_launch_srun_refuses_is_a_config_error_and_no_node_is_quarantined(h):
    name = h.name("refused")
    (h.manifests / f"{name}.yaml").write_text(
        KEEP.format(name=name).replace("gpus: 1", "gpus: 1, restart: {backoff_seconds: 0.5}")
        + 'srun_options: {container-mounts: "/tmp:/tmp"}\n')
    h.start()
    # the quarantine's threshold is 3 failures in 600 s: before this change the node was out by now
    wait_until(lambda: failed_launches(h, name) >= 4, timeout=scaled(60),
               what=lambda: f"4 refused launches (reconciler log:\n{h.log()[-3000:]})")
    st = wait_until(lambda: (s := status(h, name)).get("reason") == "ConfigError" and s, timeout=scaled(30),
                    what=lambda: f"ConfigError in {name}'s status: {status(h, name).get('reason')}")
    assert st["reasonMessage"].startswith(f"agg_0: {REFUSED} (refused for the recipe's")
    row = next(w for w in st["workers"] if w["name"] == "agg_0")
    assert row["reason"] == "ConfigError" and row["message"].startswith(REFUSED)
    assert quarantined(h) == {}
    assert not [e for e in events(h) if e["kind"] == "NodeQuarantined"]
    failed = [e for e in events(h) if e["kind"] == "LaunchFailed" and e["recipe"] == name]
    assert all(e["message"] == f"agg_0 rank 0: launcher exited 255: {REFUSED}" and e["reason"] == "ConfigError"
               for e in failed), failed
    assert any(e.get("count", 1) > 1 for e in failed)  # said again: folded, not repeated
    g = h.cli("get", name)
    assert "ConfigError" in g.stdout, g.stdout


def test_the_cluster_config_is_watched_a_bad_rewrite_is_refused_and_the_old_kept(h):
    cfg = h.tmp / "srtslurm.yaml"  # where run starts (the harness's cwd): srtctl's search finds it
    cfg.write_text('default_srun_options: {container-mounts: "/tmp:/tmp"}\n')  # the wrong config
    name = h.name("cfg")
    (h.manifests / f"{name}.yaml").write_text(KEEP.format(name=name))
    ui = free_port()
    h.start("--ui-addr", f"127.0.0.1:{ui}")
    wait_until(lambda: "reconciler started" in h.log(), timeout=scaled(30), what="run's start line")
    start = next(json.loads(l) for l in h.log().splitlines() if '"reconciler started"' in l)
    assert start["cluster_config"].startswith(f"{cfg} (sha256 ")
    wait_until(lambda: status(h, name).get("reason") == "ConfigError", timeout=scaled(60),
               what=lambda: f"ConfigError from the cluster config (log:\n{h.log()[-3000:]})")
    bad_spec = {e["message"].split(" spec ")[1].split()[0] for e in h.actions(name) if e["kind"] == "LaunchStep"}

    cfg.write_text("default_time_limit: \"2:00:00\"\n")  # the right one, written while run runs
    g = h.wait_ready(name, timeout=90)
    assert g["status"] == "Ready"
    loaded = [e for e in events(h) if e["kind"] == "ClusterConfigLoaded"]
    assert loaded and loaded[-1]["path"] == str(cfg)
    rec = json.loads((h.state / "cluster-config.json").read_text())
    assert rec["path"] == str(cfg) and rec["error"] is None
    run_json = json.loads((h.state / "run.json").read_text())
    assert run_json["clusterConfig"] == str(cfg)
    # the new spec started at once, not after the old spec's backoff: a fresh start, not a restart
    new = [e for e in h.actions(name) if e["kind"] == "LaunchStep" and e["message"].split(" spec ")[1].split()[0]
           not in bad_spec]
    assert new and "(restart" not in new[0]["message"], new
    assert quarantined(h) == {}
    d = h.cli("describe", name)
    assert f"Cluster config: {cfg} (sha256 {rec['sha256']}" in d.stdout, d.stdout
    # the status page's header (its settings) names the one in force
    wait_until(lambda: json.loads(get(f"http://127.0.0.1:{ui}/api/status")[1])["settings"]["clusterConfigInForce"]
               .startswith(f"{cfg} (sha256 {rec['sha256']}"), timeout=scaled(30), what="the page's cluster config")
    steps = h.steps(name)

    cfg.write_text("default_time_limit: \"2:00:00\"\nno_such_key: 1\n")  # invalid: refused, located
    bad = wait_until(lambda: [e for e in events(h) if e["kind"] == "ClusterConfigInvalid"], timeout=scaled(30),
                     what=lambda: f"a ClusterConfigInvalid event (log:\n{h.log()[-3000:]})")
    assert bad[0]["message"].startswith(f"{cfg}: no_such_key: unknown key"), bad
    assert f"kept in force: {cfg} (sha256 {rec['sha256']}" in bad[0]["message"]
    assert "cluster config refused; the one in force is kept" in h.log()
    h.idle(name)  # nothing is rolled out or torn down for it
    assert h.steps(name) == steps and h.get(name)["status"] == "Ready"
    kept = json.loads((h.state / "cluster-config.json").read_text())
    assert kept["sha256"] == rec["sha256"] and "no_such_key: unknown key" in kept["error"]
    # describe answers from what run recorded (it loads no config): the one in force, and the refusal
    d = h.cli("describe", name)
    assert d.returncode == 0 and f"Cluster config: {cfg} (sha256 {rec['sha256']}" in d.stdout, d.stdout
    assert f"a rewrite was refused: {cfg}: no_such_key: unknown key" in d.stdout, d.stdout
    # a command that must load the file itself refuses it with the same located error, runs on no guess
    v = h.cli("plan")
    assert v.returncode == 1 and f"error: cluster config: {cfg}: no_such_key: unknown key" in v.stderr, v.stderr
    cfg.write_text("default_time_limit: \"2:00:00\"\n")  # valid again (the teardown's run reads it too)
    wait_until(lambda: json.loads((h.state / "cluster-config.json").read_text())["error"] is None,
               timeout=scaled(30), what="the refused rewrite's error cleared by a good one")
    assert "a rewrite was refused" not in h.cli("describe", name).stdout


def test_an_engine_that_refuses_a_flag_is_a_config_error_and_no_node_is_quarantined(h):
    name = h.name("flag")
    (h.manifests / f"{name}.yaml").write_text(KEEP.format(name=name).replace(
        "gpus: 1", 'gpus: 1, args: {no-such-flag: "1"}, restart: {backoff_seconds: 0.5}'))
    h.start()
    # each life exits 2 at once (argparse); before this change 3 such relaunches quarantined the node
    wait_until(lambda: sum(w.get("restarts", 0) for w in status(h, name).get("workers", [])) >= 4, timeout=scaled(90),
               what=lambda: f"4 relaunches (reconciler log:\n{h.log()[-3000:]})")
    st = wait_until(lambda: (s := status(h, name)).get("reason") == "ConfigError" and s, timeout=scaled(30),
                    what=lambda: f"ConfigError in {name}'s status: {status(h, name).get('reasonMessage')}")
    assert st["reasonMessage"].startswith("agg_0: exited 2 at ") and "unrecognized arguments: --no-such-flag" in \
        st["reasonMessage"], st["reasonMessage"]
    assert quarantined(h) == {}
    assert not [e for e in events(h) if e["kind"] == "NodeQuarantined"]
