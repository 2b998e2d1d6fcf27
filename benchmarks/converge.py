"""Time from dropping a recipe file to every worker running and healthy, on a real Slurm.

    python benchmarks/converge.py [--workers 8] [--driver slurm|local] [--runs 3]
    python benchmarks/converge.py --smoke      # its smallest size (1 worker, 1 run): CI runs it

Its table is docs/performance.md, section "File drop to healthy workers (benchmarks/converge.py)".

Starts `reconciler run` on a scratch manifests/state directory, drops an N-worker
mocker recipe, and measures until every worker answers /health 200 (read from the
workers themselves, using the URLs the reconciler publishes in status.json), then
deletes the recipe and waits for the teardown. Prints figures; asserts nothing.
Target: <= 5 s for 8 workers.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

RECIPE = """\
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 8}}
engine: {{type: mocker, speedup_ratio: 100}}
roles: {{agg: {{workers: {workers}, gpus: 1}}}}
frontend: {{type: none}}
"""


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=0.5) as r:
            return r.status == 200
    except OSError:
        return False


def one_run(tmp: Path, driver: str, workers: int, i: int) -> tuple[float, float]:
    name = f"bench-converge-{i}"
    status = tmp / "state" / name / "status.json"
    f = tmp / "manifests" / f"{name}.yaml"
    t0 = time.monotonic()
    f.write_text(RECIPE.format(name=name, workers=workers))
    while True:
        try:
            rows = json.loads(status.read_text()).get("workers", [])
        except (FileNotFoundError, ValueError):
            rows = []
        urls = [r["url"] for r in rows if r.get("url")]
        if len(urls) == workers and all(healthy(u) for u in urls):
            break
        if time.monotonic() - t0 > 120:
            raise SystemExit("did not converge in 120 s")
        time.sleep(0.05)
    up = time.monotonic() - t0
    t1 = time.monotonic()
    f.unlink()
    while any(healthy(u) for u in urls):
        if time.monotonic() - t1 > 120:
            raise SystemExit("did not tear down in 120 s")
        time.sleep(0.05)
    return up, time.monotonic() - t1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--driver", default=None)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="the smallest size (1 worker, 1 run): that it runs")
    a = ap.parse_args()
    if a.smoke:
        a.workers, a.runs = 1, 1
    driver = a.driver or ("slurm" if shutil.which("sbatch") else "local")
    tmp = Path(tempfile.mkdtemp(prefix="converge-"))
    (tmp / "manifests").mkdir()
    # an empty recipe stays, so deleting the measured one is not "every manifest gone" (refused)
    (tmp / "manifests" / "keep.yaml").write_text(RECIPE.format(name="keep", workers=0))
    log = open(tmp / "reconciler.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "reconciler.cli", "run", "--manifests", str(tmp / "manifests"),
                             "--state", str(tmp / "state"), "--driver", driver, "--resync", "5"],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        time.sleep(1.5)  # the reconciler's own start-up is not part of the figure
        ups, downs = [], []
        for i in range(a.runs):
            up, down = one_run(tmp, driver, a.workers, i)
            ups.append(up)
            downs.append(down)
            if i == 0:
                print(f"{'run':>3} {'workers':>7} {'drop -> healthy s':>17} {'delete -> gone s':>16}")
            print(f"{i + 1:>3} {a.workers:>7} {up:>17.2f} {down:>16.2f}", flush=True)
        print(f"converge ({driver}, {a.workers} workers): median {statistics.median(ups):.2f} s "
              f"(target <= 5 s, ratio {statistics.median(ups) / 5:.2f}); teardown median {statistics.median(downs):.2f} s")
    finally:
        for f in (tmp / "manifests").glob("*.yaml"):
            f.unlink()
        proc.terminate()
        proc.wait()
        subprocess.run([sys.executable, "-m", "reconciler.cli", "run", "--once", "--allow-empty", "--manifests",
                        str(tmp / "manifests"), "--state", str(tmp / "state"), "--driver", driver],
                       capture_output=True)


if __name__ == "__main__":
    main()
