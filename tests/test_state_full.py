"""State on a full disk (issue 32, item 8): an action that ran is not reported failed because its
record could not be written; what could not be written is said as such, and nothing is launched
twice. The write fails the way a full disk fails it (OSError ENOSPC) in the state directory."""

from __future__ import annotations

import errno
import json

from reconciler.drivers.memory import MemoryDriver
from reconciler.shell.loop import Controller
from reconciler.drivers.state import StateDir

RECIPE = "name: r\nmodel: {path: m}\nengine: mocker\nfrontend: {type: none}\nroles: {agg: {workers: 1, gpus: 1}}\n"


def test_a_launch_whose_record_cannot_be_written_is_done_not_failed(tmp_path, monkeypatch):
    m = tmp_path / "manifests"
    m.mkdir()
    (m / "r.yaml").write_text(RECIPE)
    drv = MemoryDriver(host="node0")
    c = Controller(m, tmp_path / "state", drv)
    c.debounce = 0
    c.tick()  # the allocation

    def full(self, *a, **kw):
        raise OSError(errno.ENOSPC, "No space left on device", str(self.root / "r" / "launches.json"))

    monkeypatch.setattr(StateDir, "count_launch", full)
    _, done = c.tick()
    assert [type(a).__name__ for a in done] == ["LaunchStep"]
    assert len(drv.steps) == 1 and c.executor.failures == {}
    events = [json.loads(l) for l in (tmp_path / "state" / "events.jsonl").read_text().splitlines()]
    assert not [e for e in events if e["kind"] == "ActionFailed"]
    (bad,) = [e for e in events if e["kind"] == "StateWriteFailed"]
    assert "done, but its record could not be written to state/ (the disk is full" in bad["message"]
    for _ in range(3):
        c.tick()
    assert len(drv.steps) == 1  # adopted, not launched again
