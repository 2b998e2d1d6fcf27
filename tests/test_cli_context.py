"""Read commands see what `run` decided: its instance, port range and manifests (state/run.json),
without repeating its flags; `get --wait` waits on `run`'s recorded status. On the real Slurm."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers import wait_until
from harness import Harness

pytestmark = pytest.mark.slurm

RECIPE = """\
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 8}}
engine: {{type: mocker, speedup_ratio: 100}}
roles: {{agg: {{workers: {workers}, gpus: 1}}}}
frontend: {{type: builtin}}
"""


@pytest.fixture
def h(tmp_path):
    harness = Harness(tmp_path, "slurm")
    # run (and the harness's cleanup) get a non-default instance from the environment; the read
    # commands below get neither it nor the port range
    harness.owner = f"ctx{os.getpid() % 100000}"
    harness.env["RECONCILER_INSTANCE"] = harness.owner
    yield harness
    harness.cleanup()


def bare(h: Harness, *args: str, cwd=None) -> subprocess.CompletedProcess:
    """A read command as a user types it: only --state, none of run's flags or environment."""
    env = {k: v for k, v in h.env.items() if k not in ("RECONCILER_PORT_RANGE", "RECONCILER_INSTANCE")}
    return subprocess.run([sys.executable, "-m", "reconciler.cli", *args, "--state", str(h.state)],
                          capture_output=True, text=True, timeout=120, cwd=cwd or h.tmp, env=env)


def recorded_phase(h: Harness, name: str) -> str | None:
    try:
        return json.loads((h.state / name / "status.json").read_text()).get("phase")
    except (FileNotFoundError, ValueError):
        return None


def test_get_wait_without_runs_flags_waits_on_runs_status(h, tmp_path):
    name = h.name("ctx")
    path = h.manifests / f"{name}.yaml"
    path.write_text(RECIPE.format(name=name, workers=1))
    h.start()
    # generous: the dev Slurm is shared, and an allocation may queue behind other people's jobs
    wait_until(lambda: recorded_phase(h, name) == "Ready", timeout=240, what=f"{name} Ready in status.json")

    path.write_text(RECIPE.format(name=name, workers=2))  # a scale-up, as in the report
    # --for ready: the new worker too (the default, Available, is met while the first one serves)
    r = bare(h, "get", name, "--wait", "--for", "ready", "--timeout", "60")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Ready" in r.stdout and "agg:2/2" in r.stdout, r.stdout
    assert "spec changed" not in r.stderr, r.stderr  # no replacement `run` never issued

    # from another directory, with only --state: the manifests are run's, not ./manifests
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = bare(h, "get", name, "-o", "json", cwd=elsewhere)
    assert r.returncode == 0, r.stderr
    (row,) = json.loads(r.stdout)
    assert row["status"] == "Ready" and row["roles"]["agg"]["ready"] == 2, row
    r = bare(h, "plan", cwd=elsewhere)
    assert r.returncode == 0, r.stdout + r.stderr  # nothing to do: the same plan as run's
    r = bare(h, "describe", name, "-o", "json", cwd=elsewhere)
    assert r.returncode == 0 and json.loads(r.stdout)["phase"] == "Ready", r.stderr

    # an explicit flag that disagrees is used, with a warning
    r = bare(h, "get", name, "--instance", "someone-else")
    assert "differs from the running reconciler's" in r.stderr, r.stderr


CRASHING = """\
schema: 2
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 8}}
engine: {{type: mocker, speedup_ratio: 100}}
roles: {{agg: {{workers: 1, gpus: 1, args: {{no-such-flag: "1"}}, restart: {{backoff_seconds: 1}}}}}}
frontend: {{type: builtin}}
"""


def test_a_crash_looping_worker_says_why_in_get_and_describe(h):
    name = h.name("crash")
    (h.manifests / f"{name}.yaml").write_text(CRASHING.format(name=name))
    h.start()

    def row() -> dict | None:
        r = bare(h, "get", name, "-o", "json")
        got = json.loads(r.stdout)[0] if r.returncode == 0 else {}
        return got if got.get("restarts", 0) >= 1 and got.get("reason") else None

    got = wait_until(row, timeout=240, interval=0.5, what=f"{name} with a REASON")
    assert got["reason"] == "ConfigError", got  # the engine refused a flag: the recipe's to fix (issue 46)
    assert got["reasonMessage"].startswith("agg_0: exited 2") and "unrecognized arguments" in got["reasonMessage"], got
    text = bare(h, "get", name, "-o", "wide").stdout
    # whether it waits out its backoff or its new life starts: the engine's refusal is the recipe's
    assert "REASON" in text and "ConfigError" in text, text
    assert "unrecognized arguments" in text, text
    r = bare(h, "describe", name)
    assert r.returncode == 0 and "agg_0: " in r.stdout and "unrecognized arguments" in r.stdout, r.stdout
    # no role: the only worker; its current life's log (empty for a moment after each relaunch)
    wait_until(lambda: "unrecognized arguments" in (r := bare(h, "logs", name)).stdout and r.returncode == 0,
               timeout=60, interval=0.5, what="the crash in `logs NAME`")
