"""A submission Slurm refuses is the deployment's REASON (issue 48, item 8): a bad partition showed
REASON '-' while every pass's sbatch failed. A memory driver refuses as sbatch does; the real Slurm
is in tests/test_submit_refused_e2e.py."""

from __future__ import annotations

import json

from reconciler.drivers import DriverError
from reconciler.drivers.memory import MemoryDriver
from reconciler.shell.loop import Controller

RECIPE = ("name: r\nmodel: {path: m}\nengine: mocker\nfrontend: {type: none}\n"
          "roles: {agg: {workers: 1, gpus: 1}}\nslurm: {partition: nosuchpart}\n")
SAID = ("sbatch --parsable failed (exit 1): sbatch: error: invalid partition specified: nosuchpart\n"
        "sbatch: error: Batch job submission failed: Invalid partition name specified")


class Refusing(MemoryDriver):
    def __init__(self) -> None:
        super().__init__(host="node0")
        self.refuse = True

    def submit(self, spec):
        if self.refuse:
            raise DriverError(SAID)
        return super().submit(spec)


def test_a_refused_submission_is_the_reason_until_one_goes_through(tmp_path):
    m = tmp_path / "manifests"
    m.mkdir()
    (m / "r.yaml").write_text(RECIPE)
    drv = Refusing()
    c = Controller(m, tmp_path / "state", drv)
    c.debounce = 0
    t = [1_800_000_000.0]
    c.clock = lambda: t[0]
    for _ in range(3):
        c.tick()
        t[0] += 60  # past the action backoff: each pass submits again
    st = json.loads((tmp_path / "state" / "r" / "status.json").read_text())
    assert st["reason"] == "SubmitFailed", st
    assert st["reasonMessage"] == "allocation 0: sbatch: error: invalid partition specified: nosuchpart"
    drv.refuse = False
    for _ in range(2):
        c.tick()
        t[0] += 60
    st = json.loads((tmp_path / "state" / "r" / "status.json").read_text())
    assert drv.allocs and st["reason"] != "SubmitFailed", st
