"""The status page in a real browser (Debian's headless Chromium through chromedriver and selenium),
against a live deployment on the local Slurm: its rows, a killed worker showing up, a screenshot."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from helpers import free_port, post, wait_until
from programs import require_program
from harness import Harness, scancel

pytestmark = pytest.mark.slurm

RECIPE = """\
schema: 2
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 8}}
engine: {{type: mocker, speedup_ratio: 100}}
roles: {{agg: {{workers: 2, gpus: 1}}}}
frontend: {{type: builtin}}
"""


@pytest.fixture
def browser():
    chromium, chromedriver = require_program("chromium"), require_program("chromedriver")
    require_program("selenium")  # CI installs all three: missing there is a failure, never a skip
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1700"):
        opts.add_argument(a)
    opts.binary_location = chromium
    drv = webdriver.Chrome(service=Service(chromedriver), options=opts)
    drv.set_page_load_timeout(30)
    yield drv
    drv.quit()


@pytest.fixture
def h(tmp_path):
    harness = Harness(tmp_path, "slurm")
    yield harness
    harness.cleanup()


def cell(browser, recipe: str, unit: str, css: str) -> str | None:
    """The text of one cell of a unit's row, or None while the row is not drawn (it is redrawn every 2 s)."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException

    try:
        return browser.find_element("css selector", f'tr[data-recipe="{recipe}"][data-unit="{unit}"] td.{css}').text
    except (NoSuchElementException, StaleElementReferenceException):
        return None


def test_status_page_shows_the_deployment_and_a_killed_worker(h, browser, tmp_path):
    name = h.name("ui")
    (h.manifests / f"{name}.yaml").write_text(RECIPE.format(name=name))
    port = free_port()
    h.start("--ui-addr", f"127.0.0.1:{port}")
    h.wait_ready(name, timeout=240)  # the dev Slurm is shared: an allocation may queue for a while
    endpoint = h.get(name)["endpoint"]
    for _ in range(5):  # some traffic for the plots (loopback / this host only)
        code, _ = post(f"{endpoint}/v1/chat/completions",
                       {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8})
        assert code == 200
    url = f"http://127.0.0.1:{port}/"
    settings = json.loads((h.state / "run.json").read_text())
    assert settings["uiAddr"] == f"127.0.0.1:{port}"

    browser.get(url)
    steps = h.steps(name)
    for unit in ("agg_0", "agg_1", "frontend_0"):
        wait_until(lambda u=unit: cell(browser, name, u, "phase") == "Ready", timeout=30, interval=0.2,
                   what=f"{unit} Ready on the page")
        assert f"step {steps[unit][0]}" in cell(browser, name, unit, "life")
    row = browser.find_element("css selector", f'#deployments tr[data-recipe="{name}"]')
    assert "agg 2/2" in row.text and "Ready" in row.text, row.text
    # kubectl's UP-TO-DATE and AVAILABLE, and the Available condition in the deployment's card
    # (looked up afresh each time: the page is redrawn every 2 s)
    wait_until(lambda: [browser.find_element("css selector", f'#deployments tr[data-recipe="{name}"] td.{c}').text
                        for c in ("uptodate", "available")] == ["2", "2"], timeout=30, interval=0.2,
               what="UP-TO-DATE 2 and AVAILABLE 2 on the page")
    wait_until(lambda: "Available: serving: agg 2/2" in browser.find_element(
        "css selector", f'section[data-deployment="{name}"]').text, timeout=30, interval=0.2,
        what="the Available condition in the deployment's card")
    assert "no deployment is autoscaled" in browser.find_element("css selector", "#autoscaler").text
    assert browser.find_elements("css selector", f'section[data-deployment="{name}"] svg.chart')

    # the page is read-only
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(urllib.request.Request(f"{url}api/status", data=b"{}", method="POST"), timeout=5)
    assert e.value.code == 405

    # a killed worker: the page shows its relaunch (a new step, restarts 1)
    old = steps["agg_1"][0]
    scancel(old)
    wait_until(lambda: cell(browser, name, "agg_1", "restarts") == "1"
               and old not in (cell(browser, name, "agg_1", "life") or old), timeout=60, interval=0.2,
               what=f"agg_1 relaunched on the page (reconciler log:\n{h.log()[-2000:]})")
    wait_until(lambda: cell(browser, name, "agg_1", "phase") == "Ready", timeout=60, interval=0.2,
               what="agg_1 Ready again on the page")

    shot = Path(os.environ.get("RECONCILER_ARTIFACTS", tmp_path)) / "status-page.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    print(f"status page screenshot: {shot}")
