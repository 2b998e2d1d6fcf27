"""Recipe -> services (srtctl's semantics), their units, and the readiness probes."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from reconciler.errors import RecipeError
from reconciler.shell.readiness.probe import probe_dynamo, probe_file, probe_tcp
from reconciler.desired.admission import load_text
from reconciler.desired.render import as_rows, render_units
from reconciler.core.ports import NodePortAllocator
from reconciler.desired.services import resolve
from reconciler.desired.services.units import ports_of

BASE = """\
name: s
model: {path: /m}
resources: {gpus_per_node: 8}
engine: {type: mocker}
roles: {agg: {workers: 1, gpus: 1}}
"""


def recipe(extra: str = "", frontend: str = "dynamo"):
    return load_text(BASE + f"frontend: {{type: {frontend}}}\n" + extra, "s.yaml", preflight=False).recipe


def names(r) -> list[tuple[str, str, str]]:
    return [(s.name, s.phase, s.implied_by and "implied" or "declared") for s in resolve(r)]


def test_the_dynamo_frontend_implies_etcd_and_a_nats_plane_implies_nats():
    assert names(recipe()) == [("etcd", "infra", "implied")]
    assert names(recipe("dynamo: {request_plane: nats}\n")) == [("etcd", "infra", "implied"), ("nats", "infra", "implied")]
    assert names(recipe("dynamo: {event_plane: nats}\n"))[1][0] == "nats"
    assert names(recipe(frontend="builtin")) == []
    assert names(recipe("reconcile: {discovery: file}\n")) == []  # file discovery: no etcd


def test_a_declared_entry_takes_an_implied_one_over_or_switches_it_off():
    r = recipe("services:\n  - {name: etcd, type: etcd, args: [--quota-backend-bytes, '1000000']}\n")
    (etcd,) = resolve(r)
    assert etcd.implied_by and etcd.args == ("--quota-backend-bytes", "1000000")
    assert resolve(recipe("services:\n  - {name: etcd, type: etcd, enabled: false}\n")) == []
    ext = recipe("services:\n  - {name: etcd, type: etcd, external: 'http://e:2379'}\n")
    rows = as_rows(render_units(ext, None, __import__("pathlib").Path("/st")))
    assert not any(r["role"].startswith("svc-") for r in rows)  # external: nothing launches
    assert {r["env"]["ETCD_ENDPOINTS"] for r in rows} == {"http://e:2379"}


def test_generic_service_defaults_and_placeholders():
    r = recipe("services:\n  - name: Side_Car\n    command: [srv, --at, '{head_node}:9', '{json}']\n"
               "    readiness: {http: {port: 9911, path: /ok}}\n")
    spec = resolve(r)[-1]
    assert (spec.role, spec.phase, spec.critical, spec.readiness.kind) == ("svc-side-car", "after_frontend", False, "http")
    (row,) = [x for x in as_rows(render_units(r, None, __import__("pathlib").Path("/st"))) if x["role"] == "svc-side-car"]
    assert row["argv"] == ["srv", "--at", "node1:9", "{json}"]  # only srtctl's names are substituted
    assert row["health"] == "http://node1:9911/ok" and row["probe"] == "http"
    assert row["env"]["ETCD_ENDPOINTS"].startswith("http://node1:")  # inherit_discovery_env defaults to true


def test_a_generic_service_gets_an_allocated_port_for_its_command_env_and_probe():
    r = recipe("services:\n  - name: side\n    command: [srv, --port, '{port}', --peer, '{node}:{port}']\n"
               "    env: {SIDE_URL: 'http://{head_node}:{port}/x', RAW: '{\"a\": 1}'}\n"
               "    readiness: {http: {port: '{port}', path: /ok}, interval_seconds: 7}\n")
    (side,) = [u for u in render_units(r, None, __import__("pathlib").Path("/st")) if u.role == "svc-side"]
    port = side.ports["port"]
    assert side.launches[0].argv == ("srv", "--port", str(port), "--peer", f"node1:{port}")
    env = dict(side.launches[0].env)
    assert env["SIDE_URL"] == f"http://node1:{port}/x" and env["RAW"] == '{"a": 1}'
    assert (side.health_port, side.health_path, side.probe, side.probe_interval) == (port, "/ok", "http", 7.0)
    # the cross-recipe allocator: another recipe's service on the same node gets another port
    other = load_text(BASE.replace("name: s", "name: t") + "frontend: {type: dynamo}\n"
                      "services:\n  - {name: side, command: [srv, '{port}'], readiness: {port: '{port}'}}\n",
                      "t.yaml", preflight=False).recipe
    alloc = NodePortAllocator(20000, 20100)
    a, b = (ports_of(resolve(x)[-1], x.name, "vm", alloc) for x in (r, other))
    assert set(a) == set(b) == {"port"} and a["port"] != b["port"]
    (b_unit,) = [u for u in render_units(other, None, __import__("pathlib").Path("/st")) if u.role == "svc-side"]
    assert b_unit.probe == "tcp" and b_unit.health_port == b_unit.ports["port"]
    # a service that never writes {port} is given none; implied kinds are probed on every pass
    plain = recipe("services:\n  - {name: side, command: [srv], readiness: {port: 9000}}\n")
    units = {u.role: u for u in render_units(plain, None, __import__("pathlib").Path("/st"))}
    assert units["svc-side"].ports == {} and units["svc-side"].probe_interval == 2.0  # srtctl's default
    assert units["svc-etcd"].probe_interval == 0.0


def test_a_file_probe_path_takes_placeholders_and_is_relative_to_the_recipe_dir():
    r = recipe("services:\n  - {name: side, command: [srv], readiness: {file: {path: 'ready-{node}'}}}\n")
    (side,) = [u for u in render_units(r, None, __import__("pathlib").Path("/st")) if u.role == "svc-side"]
    assert (side.probe, side.probe_arg) == ("file", "/st/s/ready-node1")


PD = """\
name: s
model: {path: /m}
resources: {gpus_per_node: 8}
engine: {type: mocker}
frontend: {type: sglang-router}
roles:
  prefill: {workers: 2, gpus: 4}
  decode: {workers: 4, gpus: 4}
"""


@pytest.mark.parametrize("node, want", [
    # srtctl: one instance per distinct node the placed workers use (two TP4 workers share a node)
    ("head", [("node1", "0", "0")]),
    ("prefill", [("node1", "0", "0")]),
    ("decode", [("node2", "0", "1"), ("node3", "1", "2")]),
    ("workers", [("node1", "0", "0"), ("node2", "1", "1"), ("node3", "2", "2")]),
    ("compute", [("node1", "0", "0"), ("node2", "1", "1"), ("node3", "2", "2")]),
    ("all", [("node1", "0", "0"), ("node2", "1", "1"), ("node3", "2", "2")]),
])
def test_worker_node_placements_run_one_instance_per_node(node, want):
    r = load_text(PD + f"services:\n  - name: mon\n    placement: {{node: {node}}}\n"
                  "    command: [mon, '{node}', '{index}', '{node_id}', '{role}', '{head_node}', '{port}']\n",
                  "s.yaml", preflight=False).recipe
    units = [u for u in render_units(r, None, __import__("pathlib").Path("/st")) if u.role == "svc-mon"]
    assert [(u.nodes[0], str(u.index), str(u.ordinals[0])) for u in units] == want
    for u in units:  # each instance its node, its index, its own port on its node
        assert u.launches[0].argv == ("mon", u.nodes[0], str(u.index), str(u.ordinals[0]), node, "node1",
                                      str(u.ports["port"]))


DEDICATED = ("dynamo: {request_plane: nats}\nservices:\n  - {name: etcd, type: etcd, placement: {node: dedicated}}\n"
             "  - {name: nats, type: nats, placement: {node: dedicated}}\n"
             "  - {name: probe, command: [p, '{infra_node}', '{head_node}']}\n")


def test_dedicated_puts_the_discovery_plane_on_one_more_node_that_no_worker_uses():
    from reconciler.desired.build import build_recipe

    r = recipe(DEDICATED)
    units = render_units(r, None, __import__("pathlib").Path("/st"))
    by_role = {u.role: u for u in units}
    assert by_role["svc-etcd"].nodes == by_role["svc-nats"].nodes == ("node2",)
    assert by_role["agg"].nodes == by_role["frontend"].nodes == ("node1",)
    env = dict(by_role["agg"].launches[0].env)
    assert env["ETCD_ENDPOINTS"] == f"http://node2:{by_role['svc-etcd'].ports['client']}"
    assert env["NATS_SERVER"] == f"nats://node2:{by_role['svc-nats'].ports['client']}"
    assert any("node2" in a for a in by_role["svc-etcd"].launches[0].argv)  # it advertises its own node
    assert by_role["svc-probe"].launches[0].argv == ("p", "node2", "node1")  # srtctl's infra node is the dedicated one
    # the allocation asks Slurm for the workers' node and the dedicated one
    d = build_recipe(r, [], NodePortAllocator(), __import__("pathlib").Path("/st"), "python3")
    assert [(a.start, a.count) for a in d.allocs] == [(0, 2)]
    assert {("svc-etcd", 0), ("svc-probe", 0), ("agg", 0)} <= set(d.waiting)
    # a dedicated node for a service placed nowhere else: the plain recipe asks for one node
    plain = build_recipe(recipe(), [], NodePortAllocator(), __import__("pathlib").Path("/st"), "python3")
    assert [(a.start, a.count) for a in plain.allocs] == [(0, 1)]


def test_v1s_dedicated_infra_node_places_the_implied_etcd_and_nats_there():
    r = recipe("infra: {etcd_nats_dedicated_node: true}\ndynamo: {request_plane: nats}\n")
    by_role = {u.role: u for u in render_units(r, None, __import__("pathlib").Path("/st"))}
    assert by_role["svc-etcd"].nodes == by_role["svc-nats"].nodes == ("node2",) and by_role["agg"].nodes == ("node1",)


def test_etcd_and_nats_share_the_dedicated_node_or_neither_has_it():
    with pytest.raises(RecipeError) as e:
        load_text(BASE + "frontend: {type: dynamo}\n" + DEDICATED.replace(
            "  - {name: nats, type: nats, placement: {node: dedicated}}\n", "  - {name: nats, type: nats}\n"),
            "s.yaml", preflight=False)
    assert e.value.key == "services.1.placement.node" and "both or neither" in e.value.message


def test_the_same_fixed_probe_port_on_different_nodes_is_fine():
    r = load_text(PD + "services:\n  - {name: a, command: [x], placement: {node: prefill}, readiness: {port: 9000}}\n"
                  "  - {name: b, command: [y], placement: {node: decode}, readiness: {port: 9000}}\n",
                  "s.yaml", preflight=False).recipe
    assert [s.name for s in resolve(r)] == ["a", "b"]


def test_a_typed_command_replaces_the_program_only_and_containers_get_srtctls_mounts():
    r = load_text(BASE.replace("model: {path: /m}", "model: {path: /m, container: img.sqsh}")
                  + "frontend: {type: dynamo}\n" + "services:\n  - {name: etcd, type: etcd, command: [/opt/etcd/bin/etcd, --log-level, warn]}\n"
                  "  - {name: side, command: [srv], container: side.sqsh}\n", "s.yaml", preflight=False).recipe
    units = {u.role: u for u in render_units(r, None, __import__("pathlib").Path("/st"))}
    argv = units["svc-etcd"].launches[0].argv
    assert argv[5] == "/opt/etcd/bin/etcd" and f"http://0.0.0.0:{units['svc-etcd'].ports['client']}" in argv
    assert argv[-2:] == ("--log-level", "warn")
    side = dict(units["svc-side"].srun_options)
    assert units["svc-side"].container == "side.sqsh" and "no-container-entrypoint" in side
    assert "/st/s/configs:/st/s/configs" in side["container-mounts"]


def test_nats_payload_option_writes_a_server_config():
    r = recipe("services:\n  - {name: nats, type: nats, options: {max_payload_mb: 24}}\n")
    (nats,) = [u for u in render_units(r, None, __import__("pathlib").Path("/st")) if u.role == "svc-nats"]
    (conf,) = nats.files.values()
    assert f"port: {nats.ports['client']}" in conf and f"max_payload: {24 * 1024 * 1024}" in conf
    assert "-c" in nats.launches[0].argv


@pytest.mark.parametrize("extra, key, words", [
    ("services:\n  - {name: a, command: [x]}\n  - {name: a, command: [y]}\n", "services.1.name", "duplicate"),
    ("services:\n  - {name: a}\n", "services.0.command", "needs a command"),
    ("services:\n  - {name: a, type: ray}\n", "services.0.type", "unsupported feature"),
    ("services:\n  - {name: a, type: bogus}\n", "services.0.type", "unknown service type"),
    ("services:\n  - {name: a, command: [x], start: later}\n", "services.0.start", "expected one of"),
    ("services:\n  - {name: a, command: [x], placement: {node: decode}}\n", "services.0.placement.node",
     "no decode role"),
    ("services:\n  - {name: a, command: [x], placement: {node: racks}}\n", "services.0.placement.node",
     "expected one of"),
    ("services:\n  - {name: a, command: [x], placement: {node: dedicated}}\n", "services.0.placement.node",
     "cannot be placed on 'dedicated'"),
    ("services:\n  - {name: nats, type: nats, placement: {node: workers}}\n", "services.0.placement.node",
     "cannot be placed on 'workers'"),
    ("services:\n  - {name: a, command: [x], placement: {node: all, per: worker}}\n",
     "services.0.placement.node", "a per-worker service is placed on workers"),
    ("services:\n  - {name: a, command: [x], build_command: [make]}\n", "services.0.build_command", "from source"),
    ("services:\n  - {name: a, command: [x], source: {git: 'https://x/y', rev: main}}\n", "services.0.source",
     "from source"),
    ("services:\n  - {name: a, command: [x], nodes: 2}\n", "services.0.nodes", "node pools"),
    ("services:\n  - {name: a, command: [x], readiness: {port: 9000}}\n"
     "  - {name: b, command: [y], placement: {node: agg}, readiness: {tcp: {port: 9000}}}\n",
     "services.1.readiness", "same node"),
    ("services:\n  - {name: a, command: [x], external: 'http://x'}\n", "services.0.external", "cannot be external"),
    ("services:\n  - {name: nats, type: nats, options: {speed: 1}}\n", "services.0.options.speed", "unknown option"),
    ("services:\n  - {name: nats, type: nats, options: {max_payload_mb: lots}}\n", "services.0.options.max_payload_mb",
     "whole number"),
    ("services:\n  - {name: etcd, type: generic, command: [etcd]}\n", "services.0.type", "implied etcd"),
    ("services:\n  - {name: my-etcd, type: etcd}\n", "services.0.name", "one per recipe"),
    ("frontend: {type: dynamo, args: {http-port: 9000}}\n", "frontend.args.http-port", "frontend.port"),
    ("services:\n  - {name: a, command: [x], readiness: {port: 1, log: {pattern: x}}}\n", "services.0.readiness",
     "exactly one"),
    ("services:\n  - {name: a, command: [x], readiness: {log: {pattern: '('}}}\n",
     "services.0.readiness.log.pattern", "cannot be matched in linear time (missing )"),
    ("services:\n  - {name: a, command: [x], readiness: {file: {path: r, mode: any}}}\n",
     "services.0.readiness.file.mode", "unknown key"),
    ("services:\n  - {name: a, command: [x], readiness: {file: {}}}\n", "services.0.readiness.file.path",
     "expected a file path"),
    ("services:\n  - {name: a, command: [x], readiness: {tcp: {port: '{other}'}}}\n",
     "services.0.readiness.tcp.port", "valid integer"),
    ("services:\n  - {name: nats, type: nats, readiness: {port: '{port}'}}\n", "services.0.readiness",
     "generic service's allocated port"),
])
def test_bad_services_are_located(extra, key, words):
    fe = "" if extra.startswith("frontend") else "frontend: {type: dynamo}\n"
    with pytest.raises(RecipeError) as e:
        load_text(BASE + fe + extra, "s.yaml", preflight=False)
    assert e.value.key == key and words in e.value.message and e.value.line is not None, str(e.value)


def test_file_discovery_across_nodes_needs_a_shared_directory():
    multi = BASE.replace("roles: {agg: {workers: 1, gpus: 1}}", "roles: {agg: {workers: 2, gpus: 8}}")
    with pytest.raises(RecipeError, match="shared_dir"):
        load_text(multi + "frontend: {type: dynamo}\nreconcile: {discovery: file}\n", "s.yaml", preflight=False)
    r = load_text(multi + "frontend: {type: dynamo}\nreconcile: {discovery: file, discovery_dir: /shared/d}\n",
                  "s.yaml", preflight=False).recipe
    rows = as_rows(render_units(r, None, __import__("pathlib").Path("/st")))
    assert {x["env"]["DYN_FILE_KV"] for x in rows} == {"/shared/d"}
    assert {x["env"]["DYN_DISCOVERY_BACKEND"] for x in rows} == {"file"}


class _Dyn(BaseHTTPRequestHandler):
    body = b""
    status = 503

    def do_GET(self):  # noqa: N802
        self.send_response(self.status)
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *a):
        pass


@pytest.mark.parametrize("status, body, ready", [
    (200, b"{}", True),
    (503, b'{"status":"notready","endpoints":{"generate":"ready","kv":"ready"}}', True),  # dynamo.mocker 1.6
    (503, b'{"status":"notready","endpoints":{"generate":"notready"}}', False),
    (503, b'{"status":"notready","endpoints":{}}', False),
    (503, b"not json", False),
])
def test_dynamo_system_health(status, body, ready):
    handler = type("H", (_Dyn,), {"status": status, "body": body})
    srv = HTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        assert probe_dynamo("127.0.0.1", srv.server_address[1], "/health") is ready
    finally:
        srv.shutdown()
        srv.server_close()


def test_tcp_and_file_probes(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        assert not probe_tcp("127.0.0.1", port)  # bound, not listening
        s.listen()
        assert probe_tcp("127.0.0.1", port)
    f = tmp_path / "ready"
    assert not probe_file(str(f))
    f.write_text("")
    assert not probe_file(str(f))  # srtctl: a non-empty regular file
    f.write_text("ok")
    assert probe_file(str(f))


def test_workers_away_from_a_pending_head_allocation_wait_instead_of_losing_their_discovery():
    from pathlib import Path

    from reconciler.desired.build import build_recipe
    from reconciler.core.ports import NodePortAllocator
    from reconciler.world import Alloc

    r = load_text(BASE.replace("roles: {agg: {workers: 1, gpus: 1}}", "roles: {agg: {workers: 2, gpus: 8}}")
                  + "frontend: {type: dynamo}\nreconcile: {nodes_per_allocation: 1}\n", "s.yaml", preflight=False).recipe
    both = [Alloc("1", "s", 0, 0, 1, "RUNNING", "None", ("n1",)), Alloc("2", "s", 1, 1, 1, "RUNNING", "None", ("n2",))]
    d = build_recipe(r, both, NodePortAllocator(), Path("/st"), "py")
    assert {u.name for u in d.units} == {"agg_0", "agg_1"} and d.services
    head_requeued = [Alloc("1", "s", 0, 0, 1, "PENDING", "Priority", ()), both[1]]
    d = build_recipe(r, head_requeued, NodePortAllocator(), Path("/st"), "py")
    assert d.units == () and set(d.waiting) == {("agg", 0), ("agg", 1), ("svc-etcd", 0)}
