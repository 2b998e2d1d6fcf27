"""Service kinds: what a ``type`` supplies. One entry per kind; adding one is a class and a line.

srtctl's defaults: etcd and NATS start in phase ``infra`` on the infra node and are
critical; a generic service runs exactly its command, in phase ``after_frontend``. Ports
differ from srtctl's fixed 2379/4222: they come from the cross-recipe allocator, so two
recipes (or two reconcilers) on one node never collide.
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
    placements: tuple[str, ...] = ("head", "infra")
    external: bool = False  # may point at an instance that already runs
    options: tuple[str, ...] = ()

    def command(self, program: str, host: str, ports: Mapping[str, int], data_dir: str,
                config_file: str | None) -> list[str]:
        raise NotImplementedError(f"service type {self.name} has no default command")

    def config_text(self, ports: Mapping[str, int], data_dir: str, options: Mapping[str, object]) -> str | None:
        return None


class Etcd(Kind):
    def command(self, program, host, ports, data_dir, config_file):
        c, p = ports["client"], ports["peer"]
        return [program, "--name", "default", "--data-dir", data_dir,
                "--listen-client-urls", f"http://0.0.0.0:{c}", "--advertise-client-urls", f"http://{host}:{c}",
                "--listen-peer-urls", f"http://127.0.0.1:{p}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{p}",
                "--initial-cluster", f"default=http://127.0.0.1:{p}"]


class Nats(Kind):
    def command(self, program, host, ports, data_dir, config_file):
        if config_file:
            return [program, "-c", config_file]
        return [program, "-js", "-p", str(ports["client"]), "-sd", data_dir]

    def config_text(self, ports, data_dir, options):
        mb = options.get("max_payload_mb")
        if mb is None:
            return None
        return (f"port: {ports['client']}\nmax_payload: {int(mb) * 1024 * 1024}\n"  # type: ignore[call-overload]
                f'jetstream {{ store_dir: "{data_dir}" }}\n')


class Generic(Kind):
    pass


KINDS: dict[str, Kind] = {
    "etcd": Etcd("etcd", "infra", True, ("client", "peer"), "client", ("head", "infra"), True),
    "nats": Nats("nats", "infra", True, ("client",), "client", ("head", "infra"), True, ("max_payload_mb",)),
    "generic": Generic("generic", "after_frontend", False),
}
# srtctl kinds that come with later work (the engines issue) or need hardware: refused, not ignored
NOT_YET = ("mooncake-master", "mooncake-store", "mooncake-donor", "dcgm-exporter", "node-exporter",
           "process-exporter", "lmcache-server", "ray", "gms")
# the program each typed kind runs when the recipe gives no command (on the hosts: from PATH)
PROGRAMS = {"etcd": "etcd", "nats": "nats-server"}
