"""The worker preamble that installs the recipe's Dynamo into the engine container, as srtctl does.

srtctl installs Dynamo before a ``dynamo.*`` worker starts whenever the frontend is Dynamo
and ``dynamo.install`` is true — the default, with ai-dynamo 0.8.0 when the recipe names no
version (which is why recipes for images that ship Dynamo say ``install: false``). Here:
``source.pypi`` / v1 ``version`` (pip from pypi.nvidia.com) and ``source.wheel`` / v1
``wheel`` (a wheel file, or a version srtctl would prefetch: taken from the index) are installed; source builds (``source.git``, v1 ``hash``,
``top_of_tree``) are not run and are reported as carried. Nothing is installed when the
workers run on the hosts (the cluster config's ``host_runtime`` already has Dynamo) or
outside a container.

The preamble is ``bash -c SCRIPT dynamo-install <argv...>``: the version and wheel are
shell-quoted into SCRIPT, the worker's own argv follows as positional arguments and is
``exec``'d unchanged, so recipe text never reaches the shell unquoted. Ranks of one node
take a lock, and a node that already has the version skips the install.
"""

from __future__ import annotations

import re
import shlex

from reconciler.recipe.model import Recipe

DEFAULT_VERSION = "0.8.0"  # srtctl's DEFAULT_PYPI_VERSION
INDEX = "https://pypi.nvidia.com"
TAG = "dynamo-install"  # $0 of the preamble: how a reader (and the tests) recognise it
VERSION_RE = re.compile(r"^[0-9][0-9A-Za-z.+!_-]*$")


def install_spec(recipe: Recipe) -> tuple[str, str] | None:
    """("pypi", version) or ("wheel", path) the recipe asks for, or None (nothing to install here)."""
    d = recipe.dynamo
    if recipe.frontend.type != "dynamo" or not d.install:
        return None
    src = d.source
    if d.top_of_tree or (src is not None and src.git) or d.hash:
        return None  # a source build: carried, see not_acted_on
    wheel = (src.wheel if src else None) or d.wheel
    if wheel and (wheel.endswith(".whl") or "/" in wheel):
        return ("wheel", wheel)
    if wheel:
        # srtctl's wheel is a version it prefetches on the host; the index serves the same wheel
        return ("pypi", wheel)
    return ("pypi", (src.pypi if src else None) or d.version or DEFAULT_VERSION)


def check_version(recipe: Recipe) -> None:
    """A version pip cannot read is a recipe error (validate); the preamble quotes whatever it gets."""
    spec = install_spec(recipe)
    if spec is not None and spec[0] == "pypi" and not VERSION_RE.fullmatch(spec[1]):
        raise ValueError(f"dynamo version {spec[1]!r} is not a version number (like 0.8.0 or 1.2.0.dev20260426)")


def preamble(recipe: Recipe) -> list[str]:
    spec = install_spec(recipe)
    if spec is None:
        return []
    kind, value = spec
    if kind == "pypi":
        check = f'python3 -m pip show ai-dynamo 2>/dev/null | grep -qx {shlex.quote("Version: " + value)}'
        install = ("python3 -m pip install --break-system-packages --quiet --extra-index-url "
                   f"{INDEX} {shlex.quote('ai-dynamo-runtime==' + value)} {shlex.quote('ai-dynamo==' + value)}")
    else:
        check = "false"
        install = f"python3 -m pip install --break-system-packages --quiet {shlex.quote(value)}"
    script = (f"( flock -x 200; {check} || {install} ) 200>/tmp/.rcl-dynamo-install.lock "
              '|| { echo "dynamo install failed" >&2; exit 1; }; exec "$@"')
    return ["bash", "-c", script, TAG]


def strip(argv: list[str]) -> tuple[list[str], str | None]:
    """(the worker's own argv, the preamble script or None)."""
    if len(argv) > 3 and argv[0] == "bash" and argv[1] == "-c" and argv[3] == TAG:
        return argv[4:], argv[2]
    return argv, None
