"""An upgrade over running workers rolls nothing: the reconciler of the release before the
desired-state pipeline was restructured (a6d1ec6) deploys a recipe on the real Slurm and is
stopped; the current one starts on the same state and adopts every step — same step ids, no
launch, no cancel — over several ticks.

The recipe's model is a bare name (``m``), served as ``m`` by both releases. A model path with a
slash (``Qwen/Qwen3-0.6B``) was served under its last part before e1541e0 and is served as written
since: those deployments' engines and frontends get a new spec on that upgrade and are rolled
(docs/operations.md, "Upgrading the reconciler")."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import Harness
from helpers import wait_until
from support.recipes import DISAGG
from support.clusters import old_checkout  # noqa: F401 - fixtures among them

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slurm
def test_an_upgrade_adopts_every_running_step(tmp_path, old_checkout):
    h = Harness(tmp_path, "slurm")
    try:
        name = h.name("upg")
        (h.manifests / f"{name}.yaml").write_text(DISAGG.format(name=name, decode=2).replace(
            'model: {path: "Qwen/Qwen3-0.6B"}', "model: {path: m}"))
        new_env = h.env
        h.env = {**new_env, "PYTHONPATH": str(old_checkout)}  # `python -m reconciler.cli` is the old one
        h.start()
        h.wait_ready(name, timeout=90)
        before = h.steps(name)
        assert {"prefill_0", "decode_0", "decode_1", "frontend_0"} <= set(before), before
        assert h.stop() == 0
        acted = len(h.actions(name))
        h.env = new_env
        h.start()
        start = h.ticks()
        wait_until(lambda: h.ticks() >= start + 5, timeout=60, what="5 ticks of the upgraded reconciler")
        assert h.actions(name)[acted:] == [], "the upgrade launched or cancelled something"
        assert h.steps(name) == before
        assert h.get(name)["status"] == "Ready"
    finally:
        h.stop()
        h.cleanup()
