"""The package's layering holds (pyproject.toml [tool.importlinter]): each layer imports only the
layers below it, core and desired import nothing from the shell, the drivers or the CLI, recipe
nothing from backends, the serving programs none of the controller, no import cycle anywhere, and
no wing of the shell reaching into another the contract does not name.
Checked by import-linter over the real package, and shown to fail on each kind of breach."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).parent / "lint-imports"


def lint(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT), "--config", str(root / "pyproject.toml"), "--no-cache"], cwd=root,
                          capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})


def test_the_import_contracts_hold():
    r = lint(ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "6 kept, 0 broken" in r.stdout, r.stdout


@pytest.fixture
def copy(tmp_path):
    shutil.copytree(ROOT / "reconciler", tmp_path / "reconciler", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


@pytest.mark.parametrize("module, line, broken", [
    # the pure core reaching up into the shell
    ("core/probe_pace.py", "from reconciler.shell import loop  # noqa", "core and desired are pure"),
    # recipe/ learning an engine from its backend class
    ("recipe/schema.py", "from reconciler.backends import registry  # noqa", "recipe learns engines"),
    # the mocker importing the controller
    ("mocker/timing.py", "from reconciler.world import Unit  # noqa", "serving (the mocker, the router)"),
    # one wing of the shell reaching into another the contract does not name
    ("shell/cluster/nodes.py", "from reconciler.shell.gateway import sweep  # noqa", "shell wings import"),
    # a cycle between two sibling modules of one layer
    ("desired/topology.py", "from reconciler.desired import build  # noqa", "no import cycle"),
])
def test_a_broken_contract_fails(copy, module, line, broken):
    path = copy / "reconciler" / module
    path.write_text(path.read_text() + f"\n{line}\n")
    r = lint(copy)
    assert r.returncode != 0 and "BROKEN" in r.stdout, r.stdout
    assert any(broken in l and "BROKEN" in l for l in r.stdout.splitlines()), r.stdout
