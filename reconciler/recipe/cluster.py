"""The cluster config: srtctl's ``srtslurm.yaml``, the same file name and keys.

Found, as srtctl finds it, through ``--cluster-config``, then ``$SRTSLURM_CONFIG``, then
``srtslurm.yaml`` in the working directory, its parent or its grandparent. Unlike srtctl
(its issue #429: an unknown key silently dropped the whole file and jobs went to
``--partition=default``) an unknown key is an error naming the key path.

What it does to a recipe happens before validation (``apply``): account, partition,
time limit, GPUs per node and GPU type fill what the recipe leaves unset;
``model_paths`` and ``containers`` resolve aliases; ``default_mounts``,
``default_sbatch_directives`` and ``default_srun_options`` are merged under the recipe's
own. ``host_runtime`` (ours: srtctl's ``containers`` stays the alias map) runs engines on
the hosts without pyxis/enroot, with the Python environment that has Dynamo and the engines.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator

from reconciler.errors import RecipeError
from reconciler.recipe.carried import HOST_SETUP_REFUSED
from reconciler.recipe.gateway import GatewayAllocation, GatewaySettings
from reconciler.recipe.types import Env, EnvValue, Strict

FILE_NAME = "srtslurm.yaml"
ENV_VAR = "SRTSLURM_CONFIG"
# keys whose string value names a container (srtctl's alias walker), and sections it never enters
CONTAINER_KEYS = frozenset({"container", "container_image", "image", "nginx_container"})
OPAQUE = frozenset({"identity", "environment", "env", "args", "extra_args", "container_mounts", "sbatch_directives",
                    "srun_options"})


class HostRuntime(Strict):
    """Run engines on the hosts, no container: what development clusters without pyxis have."""

    python: str = "python3"  # the interpreter whose environment has ai-dynamo and the engines
    env: Env = {}  # added to every engine process (PATH, VIRTUAL_ENV, HF_HOME, ...)


class DiscoveryConfig(Strict):
    """How Dynamo components find each other on this cluster (ours; srtctl always runs etcd)."""

    backend: Literal["etcd", "file"] = "etcd"
    shared_dir: str | None = None  # file discovery across nodes: a directory every node mounts


class ClusterConfig(Strict):
    cluster: str | None = None
    default_account: str | None = None
    default_partition: str | None = None
    default_time_limit: str | None = None
    default_time_min: str | None = None  # ours: slurm.time_min for recipes that do not set it
    gpus_per_node: int | None = Field(None, ge=1, le=64)
    default_gpu_type: str | None = None
    network_interface: str | None = None
    visible_devices_env: str = "CUDA_VISIBLE_DEVICES"
    default_gpu_exporter: dict[str, Any] | None = None
    use_gpus_per_node_directive: bool = True
    use_segment_sbatch_directive: bool = True
    use_exclusive_sbatch_directive: bool = False
    use_het_jobs: bool = False
    default_sbatch_directives: dict[str, EnvValue] = {}
    default_health_check: dict[str, Any] | None = None
    srtctl_root: str | None = None
    output_dir: str | None = None
    record_launch_plan: bool = False
    model_paths: dict[str, str] = {}
    containers: dict[str, str] = {}
    cloud: dict[str, Any] | None = None
    default_mounts: dict[str, str] = {}
    default_bash_preamble: str | None = None
    default_host_setup: dict[str, Any] | None = None

    @field_validator("default_host_setup")
    @classmethod
    def _host_setup_refused(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v and (v.get("commands") or v.get("teardown")):
            raise ValueError(HOST_SETUP_REFUSED.replace("host_setup", "default_host_setup", 1))
        return v
    reporting: dict[str, Any] | None = None
    telemetry: Any = None
    nginx_raise_ulimit: bool | None = None
    git_http_version: str | None = None
    preflight: bool = True
    launcher: Literal["slurm", "docker"] = "slurm"
    docker_args: list[str] | None = None
    # ours
    host_runtime: HostRuntime | None = None
    default_srun_options: dict[str, EnvValue] = {}
    discovery: DiscoveryConfig | None = None
    # every recipe's reconcile.gateway.allocation unless it sets one (or a listen address of its own)
    default_gateway_allocation: GatewayAllocation | None = None
    # every recipe's reconcile.gateway.api_keys unless it names its own: one keys file for a site
    default_gateway_api_keys: str | None = None

    @field_validator("default_gateway_api_keys")
    @classmethod
    def _keys_file(cls, v: str | None) -> str | None:
        return GatewaySettings._keys_path(v)


# keys this reconciler reads; the rest are srtctl's and reported as carried
ACTED_ON = frozenset({
    "default_account", "default_partition", "default_time_limit", "default_time_min", "gpus_per_node", "default_gpu_type",
    "default_sbatch_directives", "model_paths", "containers", "default_mounts",
    "host_runtime", "default_srun_options", "preflight", "discovery", "visible_devices_env", "network_interface",
    "srtctl_root", "default_bash_preamble", "default_gateway_allocation", "default_gateway_api_keys",
})


@dataclass(frozen=True)
class Cluster:
    path: str
    config: ClusterConfig

    def carried(self) -> list[str]:
        return sorted(k for k in self.config.model_fields_set if k not in ACTED_ON)


def find(explicit: str | Path | None = None, cwd: Path | None = None) -> Path | None:
    if explicit:
        return Path(explicit)
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR])
    here = (cwd or Path.cwd()).absolute()
    for d in (here, here.parent, here.parent.parent):
        if (d / FILE_NAME).is_file():
            return d / FILE_NAME
    return None


def load(explicit: str | Path | None = None, cwd: Path | None = None) -> Cluster | None:
    """The cluster config in effect, or None; a named file that is missing or bad is an error."""
    path = find(explicit, cwd)
    if path is None:
        return None
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as e:
        raise RecipeError(str(path), f"cannot read the cluster config: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise RecipeError(str(path), f"YAML syntax error: {getattr(e, 'problem', e)}",
                          line=mark.line + 1 if mark else None) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise RecipeError(str(path), "expected a mapping of cluster settings")
    try:
        return Cluster(str(path), ClusterConfig.model_validate(data))
    except ValidationError as e:
        problems = []
        for err in e.errors():
            key = ".".join(str(p) for p in err["loc"])
            msg = "unknown key (srtctl's srtslurm.yaml does not have it)" if err["type"] == "extra_forbidden" \
                else err["msg"]
            problems.append(RecipeError(str(path), msg, key=key))
        problems[0].more = tuple(problems[1:])
        raise problems[0] from None


def apply(data: dict[str, Any], cluster: Cluster | None) -> tuple[dict[str, Any], list[str]]:
    """The recipe mapping (schema 2) with the cluster's defaults and aliases; notes of what changed.
    A recipe's own value always wins: a default fills only what it leaves unset."""
    if cluster is None:
        return data, []
    c = cluster.config
    d = copy.deepcopy(data)
    notes: list[str] = []
    _job_defaults(d, c, notes)
    _reconcile_defaults(d, c, notes)
    _gateway_defaults(d, c, notes)
    _runtime_defaults(d, c, notes)
    return d, notes


def _job_defaults(d: dict, c: ClusterConfig, notes: list[str]) -> None:
    """Slurm's account, partition and times, the GPUs, the model and container aliases, and the
    site's sbatch directives, srun options and mounts under the recipe's own."""
    def default(section: str, key: str, value: Any) -> None:
        if value is None:
            return
        sec = d.setdefault(section, {})
        if isinstance(sec, dict) and sec.get(key) is None:
            sec[key] = value
            notes.append(f"{section}.{key} from the cluster config: {value}")

    default("slurm", "account", c.default_account)
    default("slurm", "partition", c.default_partition)
    default("slurm", "time_limit", c.default_time_limit)
    _default_time_min(d, c.default_time_min, notes)
    default("resources", "gpus_per_node", c.gpus_per_node)
    default("resources", "gpu_type", c.default_gpu_type)
    model = d.get("model")
    if isinstance(model, dict) and isinstance(model.get("path"), str) and model["path"] in c.model_paths:
        notes.append(f"model.path alias {model['path']!r} -> {c.model_paths[model['path']]}")
        model["path"] = c.model_paths[model["path"]]
    if c.containers:
        _resolve_containers(d, c.containers, (), notes)
    for key, extra in (("sbatch_directives", c.default_sbatch_directives), ("srun_options", c.default_srun_options),
                       ("container_mounts", c.default_mounts)):
        if extra and isinstance(d.get(key, {}), dict):
            d[key] = {**extra, **d.get(key, {})}


def _reconcile_defaults(d: dict, c: ClusterConfig, notes: list[str]) -> None:
    """The reconcile block's site keys: the devices variable, the interface, srtctl's configs
    directory and the bash preamble."""
    if "visible_devices_env" in c.model_fields_set:
        rec = d.setdefault("reconcile", {})
        if isinstance(rec, dict) and "visible_devices_env" not in rec:
            rec["visible_devices_env"] = c.visible_devices_env
            notes.append(f"reconcile.visible_devices_env from the cluster config: {c.visible_devices_env}")
    if c.network_interface is not None:
        rec = d.setdefault("reconcile", {})
        if isinstance(rec, dict) and "network_interface" not in rec:
            rec["network_interface"] = c.network_interface
            notes.append(f"reconcile.network_interface from the cluster config: {c.network_interface}")
    for key, value in (("configs_dir", f"{c.srtctl_root.rstrip('/')}/configs" if c.srtctl_root else None),
                       ("bash_preamble", c.default_bash_preamble)):
        rec = d.setdefault("reconcile", {}) if value else None
        if isinstance(rec, dict) and key not in rec:
            rec[key] = value
            notes.append(f"reconcile.{key} from the cluster config")


def _gateway_defaults(d: dict, c: ClusterConfig, notes: list[str]) -> None:
    """The site's gateway allocation (not for a recipe that scales to zero: its holder wakes it
    on this host) and its API keys."""
    if c.default_gateway_allocation is not None:
        rec = d.setdefault("reconcile", {})
        gw = rec.setdefault("gateway", {}) if isinstance(rec, dict) else None
        auto = rec.get("autoscale") if isinstance(rec, dict) else None
        to_zero = isinstance(auto, dict) and auto.get("scale_to_zero_after_seconds") is not None
        if isinstance(gw, dict) and "allocation" not in gw and "listen" not in gw and not to_zero:
            gw["allocation"] = c.default_gateway_allocation.model_dump(exclude_none=True)
            notes.append(f"reconcile.gateway.allocation from the cluster config: node {c.default_gateway_allocation.node}")
        elif to_zero:  # woken by what its holder holds on this host: its gateway stays here
            notes.append("default_gateway_allocation not applied: the recipe scales to zero")
    if c.default_gateway_api_keys is not None:
        rec = d.setdefault("reconcile", {})
        gw = rec.setdefault("gateway", {}) if isinstance(rec, dict) else None
        if isinstance(gw, dict) and "api_keys" not in gw:
            gw["api_keys"] = c.default_gateway_api_keys
            notes.append("reconcile.gateway.api_keys from the cluster config")


def _runtime_defaults(d: dict, c: ClusterConfig, notes: list[str]) -> None:
    """The host runtime (no container: the engine's Python and environment) and discovery."""
    if c.host_runtime is not None:
        rec = d.setdefault("reconcile", {})
        if isinstance(rec, dict):
            rec.setdefault("container_runtime", "none")
            rec.setdefault("engine_python", c.host_runtime.python)
        if c.host_runtime.env and isinstance(d.get("environment", {}), dict):
            d["environment"] = {**c.host_runtime.env, **d.get("environment", {})}
        notes.append(f"host runtime from the cluster config: no container, {c.host_runtime.python}")
    if c.discovery is not None:
        rec = d.setdefault("reconcile", {})
        if isinstance(rec, dict):
            rec.setdefault("discovery", c.discovery.backend)
            if c.discovery.shared_dir:
                rec.setdefault("discovery_dir", c.discovery.shared_dir)
            notes.append(f"discovery from the cluster config: {rec.get('discovery')}")


def _resolve_containers(node: Any, aliases: dict[str, str], path: tuple, notes: list[str]) -> None:
    if isinstance(node, dict):
        for k, v in node.items():
            if k in OPAQUE or (isinstance(k, str) and k.endswith(("_environment", "_config"))):
                continue
            if k in CONTAINER_KEYS and isinstance(v, str) and v in aliases:
                node[k] = aliases[v]
                notes.append(f"{'.'.join(map(str, (*path, k)))} alias {v!r} -> {aliases[v]}")
            else:
                _resolve_containers(v, aliases, (*path, k), notes)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _resolve_containers(v, aliases, (*path, i), notes)


def _default_time_min(d: dict, value: str | None, notes: list[str]) -> None:
    """The cluster's default --time-min, for a recipe that sets none; not for one whose own time
    limit is shorter (the default is the site's, the limit the recipe's: the recipe wins)."""
    from reconciler.timefmt import slurm_seconds

    sec = d.setdefault("slurm", {})
    if value is None or not isinstance(sec, dict) or sec.get("time_min") is not None:
        return
    low, high = slurm_seconds(value), slurm_seconds(str(sec["time_limit"])) if sec.get("time_limit") else None
    if low is not None and high is not None and low > high:
        notes.append(f"slurm.time_min from the cluster config ({value}) not used: longer than the recipe's "
                     f"time limit {sec['time_limit']}")
        return
    sec["time_min"] = value
    notes.append(f"slurm.time_min from the cluster config: {value}")
