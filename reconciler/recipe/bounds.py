"""Bounded input: what a recipe file may cost before anything is allocated for it.

A manifest is untrusted text. Before it is validated it must be small
(``max_manifest_bytes``), its YAML aliases must not expand past a node budget (an
"alias bomb" of a few hundred bytes expands to billions of nodes), nothing may nest
deeper than ``MAX_DEPTH``, and no value may hold a NUL byte (it cannot be passed in
an argv or an environment) or a non-finite number. Engine knobs that must be positive
are checked here too, so the error names the key instead of the engine crash-looping.
"""

from __future__ import annotations

import math
import os
from typing import Any

import yaml

from reconciler.errors import RecipeError

DEFAULT_MAX_BYTES = 1 << 20
MAX_NODES = 100_000  # YAML nodes after alias expansion
MAX_DEPTH = 32
MAX_WORKERS = 10_000  # per role
MAX_NODES_PER_WORKER = 1024
MAX_GPUS_PER_WORKER = 8192
MAX_VARIANTS = 256  # deployments one sweep/override file may expand into (a grid multiplies fast)
# What lives at the top of state/ beside the recipes' directories (state/<recipe>/): a recipe so
# named would have its directory where the file is (every pass failed on
# state/quarantine.json/last-applied.yaml). Each is written by: drivers/state.py (files.json,
# events.jsonl, suspended/), shell/record.py (ports.json), shell/loop.py (controller.json,
# run.lock), cli/run_settings.py (run.json), shell/lease.py (standby.json), shell/slurm_watch.py
# (quarantine.json), shell/nodes.py (nodes.json), drivers/local.py (local/), shell/cluster_config.py
# (cluster-config.json). A new one goes here.
RESERVED_NAMES = frozenset({
    "ports.json", "files.json", "events.jsonl", "controller.json", "run.lock", "run.json", "standby.json",
    "quarantine.json", "nodes.json", "suspended", "local", "cluster-config.json",
})
# engine arguments that only make sense as positive numbers (either spelling)
POSITIVE_ARGS = frozenset({
    "max-num-seqs", "block-size", "speedup-ratio", "max-model-len", "context-length", "num-gpu-blocks",
    "tensor-parallel-size", "pipeline-parallel-size", "data-parallel-size", "tp-size", "pp-size", "dp-size",
    "max-batch-size", "max-num-tokens", "kv-cache-block-size",
})


def max_manifest_bytes() -> int:
    """The size limit of one manifest (RECONCILER_MAX_MANIFEST_BYTES raises it)."""
    try:
        return max(1, int(os.environ.get("RECONCILER_MAX_MANIFEST_BYTES", DEFAULT_MAX_BYTES)))
    except ValueError:
        return DEFAULT_MAX_BYTES


def check_size(path: str, size: int) -> None:
    limit = max_manifest_bytes()
    if size > limit:
        raise RecipeError(path, f"file is {size} bytes; a recipe may be at most {limit} bytes "
                                "(set RECONCILER_MAX_MANIFEST_BYTES to raise the limit)")


def check_text(text: str, path: str) -> yaml.Node | None:
    """Before YAML construction: NUL bytes, alias expansion and depth, on the node graph.
    Returns the composed graph (None when empty or unparsable) for ``key_lines`` to reuse."""
    if "\x00" in text:
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise RecipeError(path, "a NUL byte in the file (not a text recipe?)", line=line)
    try:
        root = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError:
        return None  # the parser reports it, located
    if root is None:
        return None
    seen = 0
    stack: list[tuple[yaml.Node, int]] = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        seen += 1
        if seen > MAX_NODES:
            raise RecipeError(path, f"YAML expands to more than {MAX_NODES} values (aliases expanding "
                                    "exponentially?); recipes do not need anchors that large",
                              line=node.start_mark.line + 1)
        if depth > MAX_DEPTH:
            raise RecipeError(path, f"nested more than {MAX_DEPTH} levels deep", line=node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                stack.append((k, depth + 1))
                stack.append((v, depth + 1))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((v, depth + 1) for v in node.value)
    return root


def check_values(data: Any, path: str, lines: dict[tuple, int]) -> None:
    """After construction: NUL bytes, NaN / infinity, and positive engine knobs, with the key path."""
    stack: list[tuple[tuple, Any]] = [((), data)]
    while stack:
        where, v = stack.pop()
        if isinstance(v, dict):
            for k, x in v.items():
                if isinstance(k, str) and "\x00" in k:
                    _fail(path, where, lines, "a NUL byte in a key")
                stack.append((where + (k,), x))
        elif isinstance(v, list):
            stack.extend((where + (i,), x) for i, x in enumerate(v))
        elif isinstance(v, str):
            if "\x00" in v:
                _fail(path, where, lines, "a NUL byte in a value (it cannot reach an argv or an environment)")
        elif isinstance(v, float) and not math.isfinite(v):
            _fail(path, where, lines, f"expected a finite number, found {v}")
        if (where and isinstance(where[-1], str) and where[-1].replace("_", "-") in POSITIVE_ARGS
                and isinstance(v, int | float) and not isinstance(v, bool) and v <= 0):
            _fail(path, where, lines, f"expected a number > 0, found {v}")


def reserved(name: str) -> str | None:
    """The state/ entry ``name`` would collide with: itself, or one it is a variant of (a file
    set aside as ``<file>.corrupt-<time>``, a rotated ``events.jsonl.1``)."""
    return next((r for r in RESERVED_NAMES if name == r or name.startswith(r + ".")), None)


def check_name(name: Any, path: str, lines: dict[tuple, int]) -> None:
    taken = reserved(name) if isinstance(name, str) else None
    if taken is not None:
        _fail(path, ("name",), lines, f"{name!r} is reserved (state/ keeps its own {taken} there); "
                                      "pick another recipe name")


def _fail(path: str, where: tuple, lines: dict[tuple, int], msg: str) -> None:
    key = ".".join(str(p) for p in where)
    raise RecipeError(path, msg, key=key, line=lines.get(where))
