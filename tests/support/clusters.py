"""Harnesses over the real clusters, as fixtures: both drivers, the 3-node Slurm (one test at a
time), the release before checked out beside this one; and readers of what a cluster runs."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import MULTINODE_CONF
from harness import Harness, sh
from helpers import wait_until
from reconciler import labels

ROOT = Path(__file__).resolve().parents[2]


DRIVERS = [pytest.param("slurm", marks=pytest.mark.slurm), "local"]


@pytest.fixture(name="h")
def slurm_h(tmp_path):
    """``h`` on the real (one-node) Slurm only, cleaned up after the test."""
    harness = Harness(tmp_path, "slurm")
    yield harness
    harness.cleanup()


@contextmanager
def deployed(tmp_path: Path, text: str, prefix: str, timeout: float = 60) -> Iterator[tuple[Harness, str, str]]:
    """One recipe (``text`` with its ``{name}``) run by a reconciler on the real Slurm until it is
    Ready: (harness, name, endpoint); cleaned up however the block ends."""
    h = Harness(tmp_path, "slurm")
    try:
        name = h.name(prefix)
        (h.manifests / f"{name}.yaml").write_text(text.format(name=name))
        h.start()
        yield h, name, h.wait_ready(name, timeout=timeout)["endpoint"]
    finally:
        h.cleanup()


@pytest.fixture(params=DRIVERS)
def h(request, tmp_path):
    harness = Harness(tmp_path, request.param)
    yield harness
    harness.cleanup()


@pytest.fixture
def mn(tmp_path, monkeypatch):
    """A harness whose reconciler, and whose own squeue/scancel, talk to the 3-node cluster. One
    test at a time holds the cluster (a node failure in one must not hit another's workers, and
    the tests size their allocations to its 12 GPUs); every node is back in service after it."""
    monkeypatch.setenv("SLURM_CONF", str(MULTINODE_CONF))
    with open(MULTINODE_CONF.parent / "tests.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        harness = Harness(tmp_path, "slurm")
        try:
            yield harness
        finally:
            harness.cleanup()
            resume_all()


def node_states() -> dict[str, str]:
    return dict(line.split() for line in sh("sinfo", "-h", "-N", "-o", "%N %T").splitlines())


def resume_all() -> None:
    """Every node back: a killed slurmd restarted (the script starts only missing ones), DOWN resumed."""
    subprocess.run(["bash", str(ROOT / "scripts" / "slurm-multinode.sh"), "up", "--nodes", "3"],
                   capture_output=True, timeout=120)
    for node, st in node_states().items():
        if not st.rstrip("*").startswith(("idle", "mixed", "alloc")):
            subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], capture_output=True)
    wait_until(lambda: all(st.rstrip("*") in ("idle", "mixed", "allocated") for st in node_states().values()),
               timeout=60, what="every node back in service")


def ranks(h: Harness, recipe: str) -> dict[tuple[str, int], tuple[str, str]]:
    """(unit, rank) -> (step id, node) of the recipe's live steps: a multi-node worker is one
    step per rank (srtctl's shape), each pinned to its node."""
    out = {}
    for line in sh("squeue", "-h", "-s", "-o", "%i|%j|%N").splitlines():
        sid, name, node = line.split("|")
        p = name.split(":")
        if len(p) == 7 and p[0] == "rcl" and p[1] == h.owner and p[2] == labels.recipe_tag(recipe):
            out[(f"{p[3]}_{p[4]}", int(p[5]))] = (sid, node)
    return out


def workers(h: Harness, recipe: str) -> dict[str, dict]:
    """The recipe's worker rows from its recorded status (nodes, ports, steps, restarts)."""
    return {w["name"]: w for w in json.loads((h.state / recipe / "status.json").read_text())["workers"]}


BEFORE = "a6d1ec6"  # the last commit before the package layout and the pipeline changed


@pytest.fixture
def old_checkout(tmp_path):
    """The release before, checked out beside this one (its own reconciler package)."""
    have = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{BEFORE}^{{commit}}"], capture_output=True)
    if have.returncode != 0:
        if os.environ.get("RECONCILER_REQUIRE_SLURM") == "1":
            pytest.fail(f"commit {BEFORE} is not in this clone's history: the upgrade test needs it")
        pytest.skip(f"commit {BEFORE} is not in this clone's history")
    where = tmp_path / "before"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(where), BEFORE], check=True,
                   capture_output=True, timeout=60)
    yield where
    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(where)], capture_output=True,
                   timeout=60)
