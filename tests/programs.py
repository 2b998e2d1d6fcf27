"""The programs CI installs, and the one rule for a test that needs one: missing, the test is
skipped, except in strict mode (RECONCILER_REQUIRE_SLURM=1, set by .ci/run), where it fails.
CI installs every one of them, so a skip there would hide a broken install behind a green run.

Mark a test or module ``pytest.mark.needs("nginx", "aiperf")`` (tests/conftest.py checks the mark
before the test's fixtures run), or call ``require_program(name)`` where the path is needed
(in a fixture, say); a program not listed below is named with its path:
``require_program("name", path)``."""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STACKS = ROOT / ".stacks"
STACKS_INSTALL = "scripts/stacks-install.sh"
BROWSER_INSTALL = "scripts/browser-install.sh"


def strict() -> bool:
    return os.environ.get("RECONCILER_REQUIRE_SLURM") == "1"


def _executable(path: str | Path) -> str | None:
    return str(path) if os.access(path, os.X_OK) else None


def _present(path: Path) -> str | None:
    return str(path) if path.is_file() else None


def _nginx() -> str | None:
    from reconciler.shell.gateway.local import nginx_binary

    return nginx_binary()


def _module(name: str) -> Callable[[], str | None]:
    def find() -> str | None:
        try:
            spec = importlib.util.find_spec(name)
        except ImportError:  # its parent package is missing
            return None
        return spec.origin if spec else None
    return find


# name -> (where it is, or None; what installs it)
PROGRAMS: dict[str, tuple[Callable[[], str | None], str]] = {
    "nginx": (_nginx, STACKS_INSTALL),
    "etcd": (lambda: shutil.which("etcd"), STACKS_INSTALL),
    "nats-server": (lambda: shutil.which("nats-server"), STACKS_INSTALL),
    "dynamo": (lambda: _executable(STACKS / "dynamo" / "bin" / "python"), STACKS_INSTALL),
    "aiperf": (lambda: _executable(STACKS / "aiperf" / "bin" / "aiperf"), STACKS_INSTALL),
    "vllm": (lambda: _executable(STACKS / "vllm" / "bin" / "vllm"), STACKS_INSTALL),  # its CPU build
    # SGLang's argument parser only (the wheel without its dependencies, run by .stacks/vllm's Python)
    "sglang-args": (lambda: _present(STACKS / "sglang-args" / "sglang" / "srt" / "server_args.py"), STACKS_INSTALL),
    "chromium": (lambda: _executable(shutil.which("chromium") or "/usr/bin/chromium"), BROWSER_INSTALL),
    "chromedriver": (lambda: _executable(shutil.which("chromedriver") or "/usr/bin/chromedriver"), BROWSER_INSTALL),
    "selenium": (_module("selenium.webdriver"), "pip install -e '.[dev]'"),
}


def missing(name: str, path: str | Path | None = None, hint: str | None = None) -> tuple[str | None, str]:
    """(where ``name`` is, or None; the message to give when it is not there)."""
    if path is not None:
        return _executable(path), f"{name} not found at {path} ({hint or STACKS_INSTALL})"
    if name not in PROGRAMS:
        raise KeyError(f"unknown program {name!r}: add it to tests/programs.py PROGRAMS or pass its path")
    find, installer = PROGRAMS[name]
    return find(), f"{name} is not installed ({hint or installer})"


def require_program(name: str, path: str | Path | None = None, hint: str | None = None) -> str:
    """Where ``name`` is. Missing: the test is skipped, or fails in strict mode."""
    found, msg = missing(name, path, hint)
    if found is not None:
        return found
    if strict():
        pytest.fail(f"RECONCILER_REQUIRE_SLURM=1 but {msg}: CI installs it, so a missing one is a failure")
    pytest.skip(msg)
