"""Service kinds: what a ``type`` supplies. One entry per kind; adding one is a class and a line.

srtctl's defaults: etcd and NATS start in phase ``infra`` on the infra node and are
critical; the Mooncake master in ``before_workers``, critical; a generic service runs
exactly its command, in phase ``after_frontend``. Ports differ from srtctl's fixed
2379/4222 and 8700-8702: they come from the cross-recipe allocator, so two recipes (or
two reconcilers) on one node never collide.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Mapping


@dataclass(frozen=True)
class Kind:
    name: str
    phase: str
    critical: bool
    port_names: tuple[str, ...] = ()  # allocated per instance
    ready_port: str | None = None  # the port whose TCP accept marks it Ready (no readiness written)
    ready_path: str | None = None  # ... or whose HTTP GET of this path answering 200 does
    ready_timeout: float = 300.0  # startup bound when the recipe writes no readiness
    placements: tuple[str, ...] = ("head", "infra")  # dedicated: a node of its own, after the workers' 
    external: bool = False  # may point at an instance that already runs
    options: tuple[str, ...] = ()
    fresh_data: bool = True  # starts from an empty data directory each life
    job_container: bool = False  # runs in the job's container unless it names its own

    def command(self, program: str, host: str, ports: Mapping[str, int], data_dir: str,
                config_file: str | None, options: Mapping[str, object]) -> list[str]:
        raise NotImplementedError(f"service type {self.name} has no default command")

    def config_text(self, ports: Mapping[str, int], data_dir: str, options: Mapping[str, object]) -> str | None:
        return None


class Etcd(Kind):
    def command(self, program, host, ports, data_dir, config_file, options):
        c, p = ports["client"], ports["peer"]
        return [program, "--name", "default", "--data-dir", data_dir,
                "--listen-client-urls", f"http://0.0.0.0:{c}", "--advertise-client-urls", f"http://{host}:{c}",
                "--listen-peer-urls", f"http://127.0.0.1:{p}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{p}",
                "--initial-cluster", f"default=http://127.0.0.1:{p}"]


class Nats(Kind):
    def command(self, program, host, ports, data_dir, config_file, options):
        if config_file:
            return [program, "-c", config_file]
        return [program, "-js", "-p", str(ports["client"]), "-sd", data_dir]

    def config_text(self, ports, data_dir, options):
        mb = options.get("max_payload_mb")
        if mb is None:
            return None
        return (f"port: {ports['client']}\nmax_payload: {int(mb) * 1024 * 1024}\n"  # type: ignore[call-overload]
                f'jetstream {{ store_dir: "{data_dir}" }}\n')


class MooncakeMaster(Kind):
    def command(self, program, host, ports, data_dir, config_file, options):
        # srtctl's flags; our ports. --metrics_port always: its default (9003) collides between recipes
        return [program, f"--port={ports['rpc']}", "--enable_http_metadata_server=true",
                f"--http_metadata_server_port={ports['metadata']}", "--eviction_high_watermark_ratio=0.9",
                f"--default_kv_lease_ttl={options.get('default_kv_lease_ttl_ms', 10000)}", "--rpc_thread_num=16",
                "--enable_metric_reporting=true", f"--metrics_port={ports['metrics']}"]


class Generic(Kind):
    pass


class Gms(Kind):
    """Dynamo's GPU Memory Service next to every failover worker: built by ``services.per_worker``."""


KINDS: dict[str, Kind] = {
    "etcd": Etcd("etcd", "infra", True, port_names=("client", "peer"), ready_port="client",
                 placements=("head", "infra", "dedicated"), external=True),
    "nats": Nats("nats", "infra", True, port_names=("client",), ready_port="client",
                 placements=("head", "infra", "dedicated"), external=True, options=("max_payload_mb",)),
    # its admin server (/health) starts last, after the RPC and metadata servers
    "mooncake-master": MooncakeMaster("mooncake-master", "before_workers", True, port_names=("rpc", "metadata", "metrics"),
                                      ready_port="metrics", ready_path="/health", placements=("head", "infra", "dedicated"),
                                      options=("store_config",), fresh_data=False, job_container=True,
                                      ready_timeout=600.0),  # srtctl waits 600 s for it
    "generic": Generic("generic", "after_frontend", False, job_container=True,
                       placements=("head", "infra", "prefill", "decode", "agg", "workers", "compute", "all")),
    # shadow-engine recovery: one instance per worker (placement.per: worker), before the workers
    "gms": Gms("gms", "before_workers", True, placements=("workers", "prefill", "decode", "agg"),
               ready_timeout=120.0, fresh_data=False, job_container=True),
}
# the worker placements of a per-worker service (placement.per: worker)
WORKER_PLACEMENTS = ("workers", "prefill", "decode", "agg")
# srtctl kinds that come with later work (the engines issue) or need hardware: refused, not ignored
NOT_YET = ("mooncake-store", "mooncake-donor", "dcgm-exporter", "node-exporter",
           "process-exporter", "lmcache-server", "ray")
# the program each typed kind runs when the recipe gives no command (on the hosts: from PATH)
PROGRAMS = {"etcd": "etcd", "nats": "nats-server", "mooncake-master": "mooncake_master"}
