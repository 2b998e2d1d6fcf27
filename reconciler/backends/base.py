"""The Backend contract: how an engine turns a recipe into processes.

An engine's knobs (the ``engine:`` mapping of a recipe) are its schema class in
``recipe/engines.py``, validated with located errors. A concrete backend extends that
class with behaviour; this base holds the optional hooks and their defaults. A backend
is made from the recipe's knobs and *bound* to its recipe (``registry.backend_for``)
before use, which is how ``get_config_for_mode`` reads the role's ``args``.

Required: ``type``, ``allocate_endpoints``, ``endpoints_to_processes``,
``build_worker_command``. Everything else has a default here.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol
from collections.abc import Mapping

from reconciler.recipe.mooncake import MooncakeKVStoreConfig
from reconciler.recipe.topology import MODES, Allocation, Endpoint, Mode, Process, processes_per_node

if TYPE_CHECKING:
    from reconciler.recipe.model import Recipe


class Ports(Protocol):
    """Where a backend gets its processes' ports: the tick's cross-recipe allocator
    (``core.ports.NodePortAllocator``), which keeps a port for the same owner and name."""

    def allocate(self, node: str, owner: str, name: str) -> int: ...

    def allocate_block(self, node: str, owner: str, name: str, size: int) -> int: ...


@dataclass(frozen=True)
class SrunConfig:
    """How a worker is launched. ``per_process``: one step per node of an endpoint;
    otherwise one step spans all the endpoint's nodes with ``ntasks`` MPI ranks."""

    per_process: bool = True
    mpi: str | None = None
    ntasks_per_gpu: bool = False


@dataclass(frozen=True)
class Runtime:
    """Facts the command builder needs beyond the recipe."""

    model_path: str
    served_model_name: str
    frontend_type: str
    config_dir: str  # where per-role engine config files are written
    python: str = "python3"  # interpreter for engines that ship with the reconciler
    engine_python: str = "python3"  # runs dynamo.* / sglang (in the container, or the cluster's host_runtime)


@dataclass(frozen=True)
class ProcessGroup:
    """A process-exporter group (ncabatoff/process-exporter ``process_names`` entry): a process
    belongs to the first group whose ``cmdline`` regexes all match its argv (joined by spaces)
    or whose ``comm`` lists its 15-character kernel name."""

    name: str
    cmdline: tuple[str, ...] = ()
    comm: tuple[str, ...] = ()


@dataclass(frozen=True)
class HealthProbe:
    port_name: str = "http"
    path: str = "/health"
    kind: str = "http"  # or "dynamo": a Dynamo system server, Ready once all its endpoints are


class Backend:
    """Behaviour only: the knobs (``type``, ``mooncake_kv_store`` and the engine's own) come from
    its schema class, which a concrete backend lists first among its bases."""

    type: str
    mooncake_kv_store: MooncakeKVStoreConfig | None

    # ---------------------------------------------------------------- binding
    def bind(self, recipe: Recipe, allocation: Allocation | None = None) -> Backend:
        """``allocation``: the build's role layouts and workers (one per build, shared by the
        recipe's engines); without it the backend computes its own from the recipe."""
        b = copy.copy(self)
        object.__setattr__(b, "_recipe", recipe)
        object.__setattr__(b, "_allocation", allocation)
        # what the backend works out once for its recipe and reuses for every worker (``memo``): a
        # new binding starts empty, never with the memo of the backend it was copied from
        object.__setattr__(b, "_memo", {})
        return b

    @property
    def memo(self) -> dict[Any, Any]:
        """This binding's memo: facts of the bound recipe the backend computes once (a build binds
        each engine once, so once per build), e.g. the mocker's knobs per role."""
        return self.__dict__.setdefault("_memo", {})

    @property
    def recipe(self) -> Recipe:
        try:
            return self._recipe  # type: ignore[attr-defined]
        except AttributeError:
            raise RuntimeError(f"{type(self).__name__} used before bind(recipe)") from None

    def needs_gpus(self) -> bool:
        """Whether its processes use the GPUs they are given: a surge life then needs GPUs of its
        own (``core/slots.surge_gpus``); a GPU-less engine's may share the old life's."""
        return True

    # ---------------------------------------------------------------- required
    def allocate_endpoints(self) -> list[Endpoint]:
        """Logical worker allocation over node ordinals and GPUs: the engine checks the recipe's
        roles and the allocation its build computed once (``recipe.topology.Allocation``)."""
        allocation = getattr(self, "_allocation", None) or Allocation(self.recipe)
        self.check_modes(tuple(allocation.layouts))
        return list(allocation.endpoints)

    def endpoints_to_processes(
        self, endpoints: list[Endpoint], hostnames: list[str], ports: Ports, owner_prefix: str
    ) -> list[Process]:
        """Physical processes; every port comes from ``ports``."""
        out: list[Process] = []
        for ep in endpoints:
            hosts = tuple(hostnames[n] for n in ep.nodes)
            owner = f"{owner_prefix}{ep.life}"
            # ports the endpoint needs once, on its leader, shared by every rank; rendezvous
            # ports only when it spans nodes
            names = self.endpoint_port_names(ep) + (self.leader_port_names(ep.mode) if len(hosts) > 1 else ())
            shared = {name: ports.allocate(hosts[0], owner, name) for name in names}
            shared |= {name: ports.allocate_block(hosts[0], owner, name, size)
                       for name, size in self.endpoint_port_blocks(ep).items()}
            blocks = self.port_blocks(ep)
            for host, rank in processes_per_node(ep, hostnames):
                own = {name: ports.allocate(host, owner, name) for name in self.port_names(ep.mode)
                       if name not in shared and name not in blocks}
                own |= {name: ports.allocate_block(host, owner, name, size) for name, size in blocks.items()}
                out.append(Process(ep, host, rank, hosts[0], hosts, {**shared, **own}))
        return out

    def build_worker_command(self, process: Process, runtime: Runtime) -> list[str]:
        raise NotImplementedError

    def env_unset(self, process: Process) -> tuple[str, ...]:
        """Variables removed from the process's environment after everything else set it
        (srtctl's ``env_to_unset``): none unless the engine says so."""
        return ()

    # ---------------------------------------------------------------- optional
    supported_modes: ClassVar[tuple[Mode, ...]] = MODES
    # the engine's processes for a process exporter, first match wins: launchers before the module
    # they wrap, retitled engine children, the handler (reconciler/exporters.py writes the file)
    process_exporter_groups: ClassVar[tuple[ProcessGroup, ...]] = ()
    # what a worker gets when the recipe turns on the automatic nsys preset (observability.nsys):
    # the engine's own NVTX ranges (units.worker_units applies it under the recipe's and role's env)
    nvtx_environment: ClassVar[Mapping[str, str]] = {}

    def _own_modes(self) -> list[Mode]:
        """The recipe's roles this engine runs (per-role engines of several types: only its own)."""
        r = self.recipe
        return [m for m, _ in r.roles.items() if r.engine_for(m).type == self.type]

    def check_modes(self, modes: tuple[Mode, ...]) -> None:
        from reconciler.recipe.topology import TopologyError

        for m in modes:
            if m not in self.supported_modes:
                raise TopologyError(f"roles.{m}", f"engine '{self.type}' does not support the {m} role")

    def port_names(self, mode: Mode) -> tuple[str, ...]:
        """Ports every process of this mode needs on its own node."""
        return ("http",)

    def leader_port_names(self, mode: Mode) -> tuple[str, ...]:
        """Ports a multi-node endpoint needs once, on its leader node (rendezvous)."""
        return ()

    def endpoint_port_names(self, ep: Endpoint) -> tuple[str, ...]:
        """Ports every endpoint needs once, on its leader, whatever its size (srtctl: the
        SGLang bootstrap port of a prefill endpoint, vLLM's data-parallel RPC port)."""
        return ()

    def endpoint_port_blocks(self, ep: Endpoint) -> dict[str, int]:
        """name -> size of consecutive ports an endpoint needs once, on its leader (TokenSpeed's
        rendezvous block: the base, five above it, one scheduler port per attention-DP rank)."""
        return {}

    def is_grpc_mode(self) -> bool:
        """Workers speak gRPC: routers are given ``grpc://`` URLs and readiness is a TCP accept."""
        return False

    def port_blocks(self, ep: Endpoint) -> dict[str, int]:
        """name -> size of consecutive ports each process needs (an engine that opens base + rank)."""
        return {}

    def get_srun_config(self) -> SrunConfig:
        return SrunConfig()

    def srun_options(self, ep: Endpoint) -> dict[str, str]:
        """srun flags the engine's launch needs (name -> value, "" for a bare flag); the
        recipe's srun_options win over them."""
        return {}

    def get_config_for_mode(self, mode: Mode) -> dict[str, Any]:
        role = self.recipe.roles.get(mode)
        return dict(role.args) if role else {}

    def get_environment_for_mode(self, mode: Mode) -> dict[str, str]:
        role = self.recipe.roles.get(mode)
        return dict(role.env) if role else {}

    def get_process_environment(self, process: Process) -> dict[str, str]:
        return {}

    def should_set_visible_devices(self) -> bool:
        return True

    def get_failover_environment(self, process: Process, directory: str) -> dict[str, str]:
        """What engine ``process.endpoint.engine`` of a shadow-engine worker gets ({} without
        ``failover``, a knob of the engines that support it: vLLM, and the mocker standing in)."""
        fo = getattr(self, "failover", None)
        if fo is None:
            return {}
        from reconciler.backends.failover import engine_environment

        return engine_environment(fo, directory, process.endpoint.engine)

    def get_served_model_name(self, default: str) -> str:
        for mode in ("agg", "prefill", "decode"):
            args = self.get_config_for_mode(mode)  # type: ignore[arg-type]
            for key in ("served-model-name", "served_model_name"):
                if args.get(key):
                    return str(args[key])
        return default

    @property
    def prometheus_metrics_path(self) -> str:
        """Where the worker serves Prometheus metrics, on its health-probe port."""
        return "/metrics"

    def fatal_log_patterns(self, mode: Mode) -> tuple[str, ...]:
        return ()

    def health_probe(self, mode: Mode) -> HealthProbe:
        """What the reconciler probes for readiness: GET http://<node>:<port><path>."""
        return HealthProbe()

    def uses_container(self) -> bool:
        return True

    def config_files(self, mode: Mode, runtime: Runtime) -> dict[str, str]:
        """Files (path -> content) a worker of this mode reads; written before launch."""
        return {}

    def process_ntasks(self, process: Process) -> int:
        """MPI ranks of one launch (only for non-per-process launchers)."""
        return 1

    # ---------------------------------------------------------------- carried knobs
    # knob -> why it is carried, not acted on; reported when the recipe sets it
    # to anything but its default (validate, render)
    carried_knobs: ClassVar[Mapping[str, str]] = {}

    def reads_extra_args(self, mode: Mode) -> bool:
        """Whether ``roles.<mode>.extra_args`` reach the command line (srtctl: trtllm-serve only)."""
        return False

    def not_acted_on(self) -> dict[str, str]:
        """Engine knobs this recipe sets that are carried without effect: knob -> why."""
        fields = self.__dataclass_fields__  # type: ignore[attr-defined]
        return {k: why for k, why in self.carried_knobs.items() if getattr(self, k) != fields[k].default}


# ---------------------------------------------------------------- arg helpers
def cli_args(args: Mapping[str, Any], *, skip: frozenset[str] = frozenset(), underscores: bool = False) -> list[str]:
    """Render an ``args`` mapping as CLI flags.

    ``True`` is a bare flag; ``False``/``None`` drop the flag; a list repeats the
    values after one flag; a mapping becomes compact JSON. Values are passed as
    separate argv items, never through a shell, so spaces and quotes survive.
    """
    out: list[str] = []
    for key, value in args.items():
        norm = key.lstrip("-")
        if _norm(norm) in skip:
            continue
        flag = "--" + (norm.replace("-", "_") if underscores else norm)
        if value is True:
            out.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, (list, tuple)):
            out.append(flag)
            out += [_scalar(v) for v in value]
        else:
            out += [flag, _scalar(value)]
    return out


def static_args(args: Mapping[str, Any]) -> list[str]:
    """srtctl's static routers' (and TileRT's) spelling: insertion order, ``_`` read as ``-``,
    True a bare flag, False/None dropped, a list the flag once per item."""
    out: list[str] = []
    for key, value in args.items():
        flag = "--" + key.lstrip("-").replace("_", "-")
        if value is True:
            out.append(flag)
        elif value is False or value is None:
            continue
        else:
            for v in value if isinstance(value, (list, tuple)) else [value]:
                out += [flag, _scalar(v)]
    return out


def _scalar(v: Any) -> str:
    if isinstance(v, (dict, list)):
        return json.dumps(v, separators=(",", ":"), sort_keys=True)
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _norm(key: str) -> str:
    return key.lstrip("-").replace("_", "-")


def pop_keys(args: dict[str, Any], *names: str) -> Any:
    """Remove every spelling of ``names`` from args; return the first value found."""
    wanted = {_norm(n) for n in names}
    found = None
    for k in list(args):
        if _norm(k) in wanted:
            v = args.pop(k)
            if found is None:
                found = v
    return found


def get_key(args: Mapping[str, Any], *names: str) -> Any:
    wanted = {_norm(n) for n in names}
    for k, v in args.items():
        if _norm(k) in wanted:
            return v
    return None
