"""Addresses on the configured NIC (reconciler.desired.netaddr): placeholders in the render, the
wrapper script run for real by bash (and through srun on the local Slurm). The interface is the
``nic`` fixture's (conftest.py: as root, a veth pair the test makes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from reconciler.desired import netaddr

ECHO = [sys.executable, "-c", "import json, os, sys; print(json.dumps([sys.argv[1:], os.environ.get('MASTER_ADDR')]))"]


def test_address_positions_get_placeholders_and_nothing_else():
    argv = ["python3", "-m", "x", "--master-addr", "node1", "--dist-init-addr", "node10:5000", "--host", "node1",
            "--data-parallel-address", "other", "--note", "node1"]
    env = {"MASTER_ADDR": "node1", "MOONCAKE_TE_META_DATA_SERVER": "http://node10:7/metadata",
           "ETCD_ENDPOINTS": "http://node1:2379", "NAME": "node1"}
    out, new_env = netaddr.resolve_at_launch(argv, env, ["node1", "node10"], "ib0", "/st/addr", "node1")
    wrapper, rest = out[:9], out[9:]
    assert wrapper[:2] == ["bash", "-c"] and wrapper[3:] == ["node-addr", "ib0", "/st/addr", "node1", "node1,node10",
                                                            "MASTER_ADDR,MOONCAKE_TE_META_DATA_SERVER"]
    assert rest == ["python3", "-m", "x", "--master-addr", "@rcl-ip:node1@", "--dist-init-addr",
                    "@rcl-ip:node10@:5000", "--host", "@rcl-ip:node1@", "--data-parallel-address", "other",
                    "--note", "node1"]
    # srtctl keeps etcd/NATS on the infra node's name; other variables are not addresses
    assert new_env == {**env, "MASTER_ADDR": "@rcl-ip:node1@",
                       "MOONCAKE_TE_META_DATA_SERVER": "http://@rcl-ip:node10@:7/metadata"}
    assert netaddr.strip(out) == rest


def test_no_address_position_no_wrapper():
    argv, env = ["vllm", "serve", "/model", "--host", "0.0.0.0", "--port", "1"], {"A": "node1"}
    assert netaddr.resolve_at_launch(argv, env, ["node1"], "ib0", "/d", "node1") == (argv, env)


def _run(tmp_path, iface, me, hosts, argv, env_vars, env, wait="3"):
    cmd = ["bash", "-c", netaddr.SCRIPT, netaddr.TAG, iface, str(tmp_path / "addr"), me, hosts, env_vars, *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                          env={**os.environ, **env, "RCL_ADDR_WAIT_S": wait})


def test_the_wrapper_substitutes_its_own_ip_and_a_published_peer(tmp_path, nic):
    iface, ip = nic
    (tmp_path / "addr").mkdir()
    (tmp_path / "addr" / "nodeB").write_text("10.9.8.7\n")
    odd = "$(touch pwned) `x` ; 'q' \"d\" @rcl-ip:nodeB@"  # recipe text: substituted, never run
    r = _run(tmp_path, f"nosuch0,{iface}", "nodeA", "nodeA,nodeB",
             [*ECHO, "--master-addr", "@rcl-ip:nodeA@", "--dist-init-addr", "@rcl-ip:nodeB@:5000", odd],
             "MASTER_ADDR", {"MASTER_ADDR": "@rcl-ip:nodeB@"})
    assert r.returncode == 0, r.stderr
    args, master = json.loads(r.stdout)
    assert args == ["--master-addr", ip, "--dist-init-addr", "10.9.8.7:5000", odd.replace("@rcl-ip:nodeB@", "10.9.8.7")]
    assert master == "10.9.8.7"
    assert (tmp_path / "addr" / "nodeA").read_text() == ip + "\n"  # published for the others
    assert not (tmp_path / "pwned").exists() and r.stderr == ""


def test_no_address_on_the_interface_or_a_silent_peer_falls_back_to_the_hostname(tmp_path):
    r = _run(tmp_path, "nosuch0", "nodeA", "nodeA,nodeB", [*ECHO, "--master-addr", "@rcl-ip:nodeA@",
                                                           "--data-parallel-address", "@rcl-ip:nodeB@"],
             "", {}, wait="1")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0] == ["--master-addr", "nodeA", "--data-parallel-address", "nodeB"]
    assert "no IPv4 address on nosuch0 on nodeA" in r.stderr and "nodeB published no address in 1s" in r.stderr


@pytest.mark.slurm
def test_the_wrapper_under_srun_learns_the_node_name_from_slurm(tmp_path, nic):
    iface, ip = nic
    node = subprocess.run(["sinfo", "-h", "-o", "%n"], capture_output=True, text=True, timeout=30).stdout.split()[0]
    cmd = ["srun", "-N1", "-n1", "-J", "rcl-test-netaddr", "--time=1", "bash", "-c", netaddr.SCRIPT, netaddr.TAG,
           iface, str(tmp_path / "addr"), "", node, "MASTER_ADDR", *ECHO, "--master-addr", netaddr.token(node)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "MASTER_ADDR": netaddr.token(node)})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1]) == [["--master-addr", ip], ip]
    assert (tmp_path / "addr" / node).read_text() == ip + "\n"
