"""The real serving stacks (etcd, NATS, Dynamo from .stacks) on the real Slurm: fixtures, the
cluster config that runs them on the host, corpus recipes copied in, and /proc readers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from programs import require_program
from support.recipes import PARKED
from harness import Harness, sh

ROOT = Path(__file__).resolve().parents[2]


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    return dict(kv.split("=", 1) for kv in raw.split("\0") if "=" in kv)


def started(pid: int) -> int:
    """Start time in clock ticks since boot (field 22 of /proc/PID/stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[19])


def host_runtime_config(tmp_path, stack_tools, tiny_model) -> None:
    """The cluster config (tmp_path/srtslurm.yaml) that runs Dynamo from .stacks on the host: the
    tiny tokenizer as the model, a scratch HOME and TMPDIR, no hub."""
    scratch = tmp_path / "scratch"
    (scratch / "home").mkdir(parents=True)
    (scratch / "tmp").mkdir()
    (tmp_path / "srtslurm.yaml").write_text(json.dumps({
        "model_paths": {"qwen3-0.6b": str(tiny_model)}, "containers": {"sglang": "unused.sqsh"},
        "host_runtime": {"python": str(stack_tools), "env": {
            "HOME": str(scratch / "home"), "TMPDIR": str(scratch / "tmp"), "HF_HUB_OFFLINE": "1"}},
    }))


DYNAMO_PY = ROOT / ".stacks" / "dynamo" / "bin" / "python"


@pytest.fixture(scope="session")
def stack_tools():
    for name in ("etcd", "nats-server", "dynamo"):
        require_program(name)
    return DYNAMO_PY


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    from reconciler.mocker.model_dir import make_model_dir

    return make_model_dir(tmp_path_factory.mktemp("models") / "tiny")


@pytest.fixture
def stack(tmp_path, stack_tools, tiny_model):
    harness = Harness(tmp_path, "slurm")
    scratch = tmp_path / "scratch"
    (scratch / "home").mkdir(parents=True)
    (scratch / "tmp").mkdir()

    def config(discovery: str | None = None, **extra) -> None:
        doc = {
            "model_paths": {"hf:Qwen/Qwen3-0.6B": str(tiny_model), "qwen3-0.6b": str(tiny_model)},
            "containers": {"dynamo-sglang": "unused.sqsh", "sglang": "unused.sqsh"},
            # Dynamo writes model cards under $HOME and a logging config per start under $TMPDIR
            "host_runtime": {"python": str(stack_tools), "env": {
                "HOME": str(scratch / "home"), "TMPDIR": str(scratch / "tmp"), "HF_HUB_OFFLINE": "1"}},
        }
        if discovery:
            doc["discovery"] = {"backend": discovery}
        doc |= extra
        (tmp_path / "srtslurm.yaml").write_text(json.dumps(doc))  # JSON is YAML

    harness.config = config
    config()
    yield harness
    harness.cleanup()


def copy_recipe(h: Harness, corpus: Path, rel: str) -> tuple[str, Path]:
    (h.manifests / "parked.yaml").write_text(PARKED)
    text = (corpus / rel).read_text()
    name = next(l.split(":", 1)[1].strip().strip('"') for l in text.splitlines() if l.startswith("name:"))
    h.names.append(name)
    f = h.manifests / Path(rel).name
    f.write_text(text)
    return name, f


def start_times(h: Harness, name: str) -> dict[str, str]:
    """unit -> the step's start time, from squeue."""
    steps = h.steps(name)
    out = {}
    for line in sh("squeue", "-h", "-s", "-o", "%i|%S").splitlines():
        sid, start = line.split("|")
        for unit, (s, _) in steps.items():
            if s == sid:
                out[unit] = start
    return out
