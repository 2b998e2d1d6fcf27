"""Per-worker services (``placement.per: worker``): one instance attached to each engine worker.

srtctl's sidecar in the Kubernetes sense (docs/services.md upstream, "Placement"): an instance
per worker of the placed roles, on every node of that worker, in the worker's device view
(the GPU mask its engines get) and with the ``{worker_*}`` placeholders. Its unit is
``svc-<name>-<role>`` at the worker's index (srtctl's ``service_<name>_<role>_<index>_<node>``),
on the worker's allocation. An instance of phase ``before_workers`` gates its own worker's
engines and later-phase per-worker instances only (``Unit.needs``): a relaunched or added
worker waits for its own instance, not for everyone's. (srtctl runs phases as stages, so a
head-node service of a later phase also waits for every instance; here it does not.)

The ``gms`` kind (shadow-engine recovery) runs one GPU Memory Service server per GPU of the
worker under a supervisor, a constant script: it waits until every server has bound its two
sockets (weights, kv_cache) in the worker's directory, prints ``GMS ready:``, then exits
non-zero when a server dies, and on SIGTERM stops the servers and removes the directory.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from reconciler.backends import failover
from reconciler.labels import split_engine
from reconciler.recipe.model import Recipe
from reconciler.desired.services.kinds import KINDS
from reconciler.desired.services.spec import ServiceSpec
from reconciler.world import Launch, Unit

GMS_SERVER = ("python3", "-m", "gpu_memory_service")  # srtctl's per-device server; a declared command replaces it
SOCKETS_PER_DEVICE = 2  # weights and kv_cache
# $1 directory, $2 GPU count, $3 startup timeout (s), then the server's argv; no recipe text in the script
GMS_SUPERVISOR = r'''set -u
dir=$1 count=$2 timeout=$3
shift 3
mkdir -p -- "$dir" && rm -f -- "$dir"/gms_*.sock || exit 1
export GMS_SOCKET_DIR="$dir"
pids=()
for ((d = 0; d < count; d++)); do "$@" --device "$d" & pids+=($!); done
stopping=0
stop() { kill -TERM "${pids[@]}" 2>/dev/null; }
trap 'stopping=1; stop' TERM INT
want=$((count * 2)) n=0
for ((waited = 0; ; waited++)); do
    for p in "${pids[@]}"; do
        if ! kill -0 "$p" 2>/dev/null; then echo "GMS server pid $p exited during startup" >&2; stop; wait; exit 1; fi
    done
    socks=("$dir"/gms_*.sock)
    if [ -e "${socks[0]}" ]; then n=${#socks[@]}; else n=0; fi
    [ "$n" -ge "$want" ] && break
    if [ "$waited" -ge "$timeout" ]; then
        echo "GMS startup timed out: $n of $want sockets in $dir after ${timeout}s" >&2; stop; wait; exit 1
    fi
    sleep 1
done
echo "GMS ready: $count device(s), $n sockets in $dir"
wait -n "${pids[@]}"
rc=$?
if [ "$stopping" = 1 ]; then wait; rm -rf -- "$dir"; exit 0; fi
echo "GMS server exited (code=$rc); stopping the rest" >&2
stop; wait
[ "$rc" = 0 ] && rc=1
exit "$rc"
'''
_PLACEHOLDER = re.compile(r"\{(node|node_ip|head_node|head_ip|index|role|worker_role|worker_index|worker_node_rank|"
                          r"worker_gpus|worker_gpu_count)\}")


def instance_role(spec: ServiceSpec, mode: str) -> str:
    return f"{spec.role}-{mode}"


def instance_keys(specs: list[ServiceSpec], mode: str, index: int) -> list[tuple[str, int]]:
    """The per-worker instances attached to worker (mode, index)."""
    return [(instance_role(s, mode), index) for s in specs if not s.external and mode in s.worker_roles]


def needs(specs: list[ServiceSpec], workers: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[tuple[str, int], ...]]:
    """worker -> the instances that must be Ready before its engines start (phase before_workers)."""
    gating = [s for s in specs if s.per_worker and s.phase in ("infra", "before_workers")]
    return {w: tuple(instance_keys(gating, *w)) for w in workers}


def attached(specs: list[ServiceSpec], workers: list[Unit]) -> list[tuple[ServiceSpec, Unit]]:
    """(service, worker) of every instance: one per placed worker (its engine 0 unit), in spec order."""
    out = []
    for s in specs:
        if not s.per_worker or s.external:
            continue
        for w in workers:
            mode, engine = split_engine(w.role)
            if engine == 0 and mode in s.worker_roles:
                out.append((s, w))
    return out


def instance_unit(recipe: Recipe, s: ServiceSpec, w: Unit, head: str | None, state_dir: Path,
                  disc_env: Mapping[str, str], container: str | None, job: str,
                  gating: tuple[tuple[str, int], ...]) -> Unit:
    """The instance of ``s`` attached to worker ``w`` (its spec hash is the pipeline's last pass);
    ``gating``: its worker's before_workers instances, which a later phase's instance waits for."""
    u = _unit(recipe, s, w, head or w.nodes[0], Path(state_dir).absolute() / recipe.name, disc_env, container, job)
    return u if s.phase in ("infra", "before_workers") else replace(u, needs=gating)


def _unit(recipe: Recipe, s: ServiceSpec, w: Unit, head: str, rdir: Path, disc_env: Mapping[str, str],
          container: str | None, job: str) -> Unit:
    kind = KINDS[s.kind]
    gpus = ",".join(map(str, w.gpus))
    env = dict(disc_env) if s.inherit_discovery_env else {}
    env |= {"PYTHONUNBUFFERED": "1"} | dict(s.env)
    # the worker's device view: the same mask its engines get, so "device k" is one GPU for both
    env[recipe.reconcile.visible_devices_env] = gpus
    launches = []
    first: dict[str, str] = {}
    for rank, node in enumerate(w.nodes):
        values = {"node": node, "node_ip": node, "head_node": head, "head_ip": head, "index": str(w.index),
                  "role": w.role, "worker_role": w.role, "worker_index": str(w.index),
                  "worker_node_rank": str(rank), "worker_gpus": gpus, "worker_gpu_count": str(len(w.gpus))}
        first = first or values

        def fill(text: str, values: dict[str, str] = values) -> str:
            return _PLACEHOLDER.sub(lambda m: values[m[1]], text)

        if s.kind == failover.GMS_KIND:
            fo = failover.config_of(recipe)
            assert fo is not None  # failover.check: a gms service needs engine.failover
            directory = failover.worker_dir(fo, recipe.name, job, w.role, w.index)
            server = [*(s.command or GMS_SERVER), *s.args]
            argv = ["/bin/bash", "-c", GMS_SUPERVISOR, s.role, directory, str(len(w.gpus)),
                    str(int(s.readiness.timeout - 30)), *server]
            lenv = env | {"GMS_SOCKET_DIR": directory}
        else:
            # as for a head-node service: the command, its env and its preamble, each instance its own values
            argv = [fill(a) for a in (*(s.command or ()), *s.args)]
            lenv = {k: fill(v) for k, v in env.items()}
        if s.preamble:
            argv = ["/bin/bash", "-c", f'{fill(s.preamble)}\nexec "$@"', s.role, *argv]
        launches.append(Launch(rank, (node,), 1, None, tuple(argv), tuple(sorted(lenv.items())), w.gpus,
                               visible_env=recipe.reconcile.visible_devices_env))
    launches_t = tuple(launches)
    r = s.readiness
    ctr = (s.container or container) if kind.job_container else (s.container or None)
    srun = tuple(sorted({**recipe.srun_options, **dict(s.srun_options)}.items()))  # + the container's: passes.wrap
    probe_arg = {"log": r.pattern, "file": str(rdir / _PLACEHOLDER.sub(lambda m: first[m[1]], r.file or ""))
                 }.get(r.kind, "")
    return Unit(
        recipe=recipe.name, role=instance_role(s, w.role), index=w.index, ordinals=w.ordinals, nodes=w.nodes,
        gpus=w.gpus, ports={}, launches=launches_t, container=ctr, health_port=None, probe=r.kind,
        probe_arg=probe_arg, phase=s.phase, startup_timeout=r.timeout, critical=s.critical, srun_options=srun,
    )
