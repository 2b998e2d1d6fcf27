"""The real vLLM (its CPU build in .stacks/vllm, scripts/stacks-install.sh) on the real Slurm.

One deployment is started per test module and shared by its tests (a cold start is 1-3
minutes on two cores and ~3 GB of memory): the tiny random-weights Llama of
``reconciler.mocker.tiny_llama``, ``vllm serve`` on the host through the cluster config's
``host_runtime``, the built-in router and the gateway in front.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from helpers import get, wait_until
from load import scaled
from programs import require_program
from reconciler.backends.vllm import start_phases
from reconciler.mocker.tiny_llama import make_tiny_llama

ROOT = Path(__file__).resolve().parents[2]
VLLM_BIN = ROOT / ".stacks" / "vllm" / "bin"
# a cold start on a 2-core machine: imports, then torch.compile's warm-up (96 s measured quiet, 5 min
# beside a busy suite), with room; stretched by the session's load factor (tests/load.py: 10 min
# were seen on a machine running six other test sessions) and never past the recipe's own
# health-check budget (1,800 s)
COLD_START = min(scaled(600.0), 1800.0)

# vLLM's flag for no torch.compile (and no warm-up of it): the modules whose subject is not the
# cold start set it. A compiled first start is 96 s quiet and 5 min beside a busy suite, most of it
# the compile; an eager one is its three processes' imports (the engine core and its worker are
# spawned, each imports vLLM again). tests/test_vllm_real_e2e.py keeps the compiled start.
EAGER = ", enforce-eager: true"

RECIPE = """\
schema: 2
name: {name}
model: {{path: {model}}}
resources: {{gpus_per_node: 8}}
engine: {{type: vllm}}
roles:
  agg:
    workers: {workers}
    gpus: 1
    args: {{max-model-len: {max_len}, dtype: float32{args}}}
frontend: {{type: builtin}}
{extra}"""


def require_vllm() -> Path:
    require_program("vllm", VLLM_BIN / "vllm")
    return VLLM_BIN / "python"


def shared(tmp_path_factory) -> tuple[Path, Path]:
    """(the tiny Llama, a HOME) shared by the session's real-vLLM modules. They run one after the
    other on one xdist worker (conftest.REAL_VLLM), and vLLM keys its torch.compile cache (under
    HOME) by its config, the model's path among it: one path and one HOME let a later module's
    first life reuse the warm-up an earlier one compiled (a relaunch's warm-up is a third of a cold
    one's, docs/performance.md). The first module's first life is still a cold start."""
    root = tmp_path_factory.getbasetemp() / "vllm-shared"
    model, done = root / "tiny-llama", root / "tiny-llama.done"
    if not done.exists():  # deterministic from its seed: one written by a module that failed midway is written again
        make_tiny_llama(model)
        done.touch()
    return model, root / "home"


def write_cluster_config(tmp: Path, home: Path | None = None) -> None:
    """``vllm serve`` from .stacks/vllm on the host: its bin first on PATH, 1 GiB of KV cache,
    a HOME for torch.compile's cache (``home``, else a scratch one in ``tmp``), no hub."""
    home = home or tmp / "home"
    home.mkdir(parents=True, exist_ok=True)
    (tmp / "srtslurm.yaml").write_text(json.dumps({
        "host_runtime": {"python": str(VLLM_BIN / "python"), "env": {
            "PATH": f"{VLLM_BIN}:/usr/local/bin:/usr/bin:/bin", "VLLM_CPU_KVCACHE_SPACE": "1",
            "HOME": str(home), "HF_HUB_OFFLINE": "1",
            # vLLM's automatic OpenMP binding pins every engine here to the same core (one NUMA
            # node, one core kept back): two lives at once (a surge, two workers) then share it.
            # Unbound with one thread each, the kernel spreads them.
            "VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}},
    }))


def deployment(tmp_path_factory, label: str, prefix: str, wide: int, text):
    """One Ready real-vLLM deployment for a module: (harness, recipe name, endpoint, served model)
    while the module runs, torn down after. ``text(name, model)`` is its recipe, named from
    ``prefix``; ``wide``: the
    module's own wide port range (harness.WIDE: lives of 52 ports each). The harness's ``model``
    is the tiny Llama it serves."""
    require_vllm()
    tmp = tmp_path_factory.mktemp(label)
    model, home = shared(tmp_path_factory)
    write_cluster_config(tmp, home)
    from harness import Harness  # a test module's, not the package's

    h = Harness(tmp, "slurm", wide=wide)
    name = h.name(prefix)
    h.model = model
    (h.manifests / f"{name}.yaml").write_text(text(name, model))
    h.start()
    try:
        yield (h, name, *serving(h, name))
    finally:
        h.cleanup()


def recipe(name: str, model: Path, workers: int = 1, args: str = "", extra: str = "", max_len: int = 256) -> str:
    return RECIPE.format(name=name, model=model, workers=workers, args=args, extra=extra, max_len=max_len)


@dataclass(frozen=True)
class StartSplit:
    """Where a cold start's time went, from the reconciler's launch to Ready."""

    slurm: float     # launch (sbatch/srun issued) -> the step's process started
    imports: float   # the process started -> vLLM's first log line
    load: float      # the weights loaded (vLLM's own figure)
    warmup: float    # profile, KV cache and warm-up (vLLM's own figure, torch.compile)
    total: float     # launch -> Ready as the reconciler recorded it

    def row(self) -> str:
        rest = self.total - self.slurm - self.imports - self.load - self.warmup
        return (f"slurm {self.slurm:.1f} s, import {self.imports:.1f} s, load {self.load:.2f} s, "
                f"warm-up {self.warmup:.1f} s, the rest (engine core start, API server, probe) {rest:.1f} s; "
                f"launch to Ready {self.total:.1f} s")


def step_started(step_id: str) -> float:
    """The step's start (squeue's START_TIME, whole seconds) as epoch seconds."""
    out = subprocess.run(["squeue", "-h", "-s", "-j", step_id.split(".")[0], "-o", "%i|%S"],
                         capture_output=True, text=True, timeout=30).stdout
    for line in out.splitlines():
        sid, _, start = line.partition("|")
        if sid == step_id:
            return datetime.strptime(start.strip(), "%Y-%m-%dT%H:%M:%S").timestamp()
    raise AssertionError(f"step {step_id} not in squeue: {out!r}")


def split(log: Path, launched: float, step_start: float, ready_after: float) -> StartSplit:
    """The split of one life, from its log (the engine's own lines) and the reconciler's record."""
    phases = start_phases(log.read_text(errors="replace"), datetime.fromtimestamp(launched).year)
    missing = {"first_line", "load", "warmup"} - set(phases)
    assert not missing, f"{log}: vLLM's log shows no {sorted(missing)} yet"
    return StartSplit(slurm=max(0.0, step_start - launched), imports=max(0.0, phases["first_line"] - step_start),
                      load=phases["load"], warmup=phases["warmup"], total=ready_after)


def serving(h, name: str) -> tuple[str, str]:
    """(endpoint, served model) once ``name`` is Ready (COLD_START: the load factor is in it
    already, so not harness.wait_ready, which would stretch it again)."""
    g = wait_until(lambda: (g := h.get(name))["status"] == "Ready" and g, timeout=COLD_START, interval=1,
                   what=lambda: f"{name} Ready (reconciler log:\n{h.log()[-3000:]})")
    status, body = get(g["endpoint"] + "/v1/models", timeout=10)
    assert status == 200, body
    return g["endpoint"], json.loads(body)["data"][0]["id"]
