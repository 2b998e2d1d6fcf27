"""Secrets stay secret (issue 48, item 5), on the real Slurm.

A recipe's ``env: {HF_TOKEN: ...}`` was in /proc/<pid>/cmdline of the srun client on the login
node and of /bin/sh on the node (``env K=V`` as arguments), which every user can read, and in
``state/<r>/last-applied.yaml`` at 0644; every state file was 0644, every directory 0755; a
symlink planted in ``state/<r>/logs/`` made sbatch's output truncate its target. Now: the value
is in no process's argv and in the engine's environment; state is 0600 / 0700; what is shown
(last-applied.yaml, events, describe) says REDACTED; a planted symlink is refused.
"""

from __future__ import annotations

import json
import os
import stat
import uuid
from pathlib import Path

import pytest

from harness import Harness
from helpers import wait_until

pytestmark = pytest.mark.slurm

RECIPE = """\
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 8}}
engine: {{type: mocker, speedup_ratio: 100}}
roles: {{agg: {{workers: 1, gpus: 1, env: {{HF_TOKEN: {token}, PLAIN_SETTING: visible-{token}x}}}}}}
frontend: {{type: none}}
"""


def _processes() -> list[tuple[int, list[bytes], list[bytes]]]:
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            env = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        out.append((int(pid), cmd.split(b"\0"), env.split(b"\0")))
    return out


@pytest.fixture
def h(tmp_path):
    harness = Harness(tmp_path, "slurm")
    yield harness
    harness.cleanup()


def test_a_token_is_in_no_argv_and_nowhere_shown(h, tmp_path):
    name = h.name("sec")
    token = "hf_" + uuid.uuid4().hex  # unique: any process that shows it is ours
    # planted before the first submission: slurmstepd (root) would truncate the target
    target = tmp_path / "precious"
    target.write_text("precious\n")
    logs = h.state / name / "logs"
    logs.mkdir(parents=True)
    (logs / "alloc-0.out").symlink_to(target)
    (h.manifests / f"{name}.yaml").write_text(RECIPE.format(name=name, token=token))
    h.start()

    def refused() -> bool:
        events = h.state / "events.jsonl"
        return events.exists() and any(
            e["kind"] == "ActionFailed" and "symbolic link" in e["message"] and e["recipe"] == name
            for e in map(json.loads, events.read_text().splitlines()))

    wait_until(refused, timeout=60, what=lambda: f"the submission refused (log:\n{h.log()[-2000:]})")
    assert h.jobs(name) == [] and target.read_text() == "precious\n"
    (logs / "alloc-0.out").unlink()  # the operator removes it: the next pass submits
    h.wait_ready(name, timeout=90)

    # the engine sees its token; no process's argv holds it (the srun client here, the launcher
    # and the engine on the node: one machine, every process in one /proc)
    procs = _processes()
    needle = token.encode()
    shown = [(pid, cmd) for pid, cmd, _ in procs if any(needle in a for a in cmd)]
    assert shown == [], shown
    engines = [pid for pid, cmd, env in procs if b"HF_TOKEN=" + needle in env]
    assert engines, "no process has HF_TOKEN in its environment"
    for pid in engines:
        env = [e for e in _processes_env(pid)]
        assert not any(e.startswith(b"RCL_ENV_") for e in env), "the launcher's carrier variables reach the engine"
        assert b"PLAIN_SETTING=visible-" + needle + b"x" in env

    # what is shown says REDACTED; the whole text is kept, private, for a reload of the recipe
    shown_text = (h.state / name / "last-applied.yaml").read_text()
    assert token not in shown_text and "HF_TOKEN: 'REDACTED'" in shown_text, shown_text
    assert token in (h.state / name / "last-applied.full.yaml").read_text()
    assert token not in (h.state / "events.jsonl").read_text()
    assert token not in (h.state / name / "status.json").read_text()
    described = h.cli("describe", name)
    assert described.returncode == 0 and token not in described.stdout + described.stderr, described.stderr

    # state/: the reconciler's user's alone
    loose = []
    for root, dirs, files in os.walk(h.state):
        for d in dirs:
            m = stat.S_IMODE(os.lstat(os.path.join(root, d)).st_mode)
            if m & 0o077:
                loose.append((os.path.join(root, d), oct(m)))
        for f in files:
            st = os.lstat(os.path.join(root, f))
            if not stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) & 0o077:
                loose.append((os.path.join(root, f), oct(stat.S_IMODE(st.st_mode))))
    assert stat.S_IMODE(os.stat(h.state).st_mode) == 0o700
    assert loose == [], loose


def _processes_env(pid: int) -> list[bytes]:
    return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
