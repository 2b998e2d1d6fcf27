"""A partition the real Slurm refuses shows as the deployment's REASON in `get` (issue 48, item 8:
it showed '-' while each pass's sbatch failed), with sbatch's own words."""

from __future__ import annotations

import pytest

from harness import Harness
from helpers import wait_until

pytestmark = pytest.mark.slurm

RECIPE = """\
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 8}}
engine: {{type: mocker, speedup_ratio: 100}}
roles: {{agg: {{workers: 1, gpus: 1}}}}
frontend: {{type: none}}
slurm: {{partition: nosuchpart}}
"""


def test_a_partition_slurm_refuses_is_the_reason_get_shows(tmp_path, summary):
    h = Harness(tmp_path, "slurm")
    try:
        name = h.name("badpart")
        (h.manifests / f"{name}.yaml").write_text(RECIPE.format(name=name))
        h.start()
        row = wait_until(lambda: (r := h.get(name)).get("reason") == "SubmitFailed" and r, timeout=60,
                         what=lambda: f"REASON SubmitFailed in get: {h.cli('get', name, '-o', 'json').stdout}")
        assert "invalid partition specified: nosuchpart" in row["reasonMessage"], row
        table = h.cli("get").stdout
        line = next(ln for ln in table.splitlines() if ln.startswith(name))
        assert "SubmitFailed" in line.split(), table
        wide = h.cli("get", "-o", "wide").stdout
        assert "invalid partition specified: nosuchpart" in wide, wide
        assert h.jobs(name) == [], "nothing was queued"
        summary(f"refused partition: get REASON {row['reason']}: {row['reasonMessage']}")
    finally:
        h.cleanup()
