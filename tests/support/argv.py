"""The verdict on a corpus's engine commands parsed by the engine's own parser (tests/engine_argv.py
writes the answer; tests/test_vllm_argv.py and tests/test_sglang_argv.py read it)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

from programs import STACKS

DYNAMO_PY = STACKS / "dynamo" / "bin" / "python"


def run_check(python: Path, check: Path, dynamo_owns: Iterable[str], skew: Iterable[str], items: list[dict],
              env: Mapping[str, str] | None = None) -> dict:
    """The check's answer for ``items`` (tests/engine_argv.py), run by the engine's ``python``,
    given the flags Dynamo's worker parses itself as Dynamo's own Python lists them (which must
    include ``dynamo_owns``) and the other version's flags ``skew``."""
    flags = subprocess.run([str(DYNAMO_PY), str(check), "--list-dynamo-flags"], capture_output=True, text=True,
                           timeout=300, check=True).stdout
    assert set(dynamo_owns) <= set(json.loads(flags))
    r = subprocess.run([str(python), str(check), "--dynamo-flags", flags, "--skew", json.dumps(sorted(skew))],
                       input=json.dumps(items), capture_output=True, text=True, timeout=800,
                       env=None if env is None else dict(env))
    assert r.returncode == 0, f"the check itself failed: {r.stderr[-3000:]}"
    return json.loads(r.stdout)


def probe_refusals(out: dict) -> dict[str, str]:
    """The probes' refusals (id -> the engine's message) in the check's answer."""
    return {x["id"]: x["error"] for x in out["refused"] if x["id"].startswith("probe:")}


def verdict(out: dict, probes: int, items: int, corpus: Path, skew_table: Mapping[str, str],
            engine: str) -> tuple[dict[str, str], dict[str, list[str]], set[str]]:
    """(the corpus's refused commands: id -> the engine's message; id -> the other version's flags
    taken out before the rest of its command parsed; every such flag). Fails when the check did not
    answer for every command, took a flag out of a probe, or when ``skew_table`` lists a flag no
    recipe writes any more or one a recipe's file does not hold (then the backend added it)."""
    assert out["checked"] == items + probes
    refused = {x["id"]: x["error"] for x in out["refused"] if not x["id"].startswith("probe:")}
    skew = out["skew"]
    assert not any(k.startswith("probe:") for k in skew), skew
    used = {f for flags in skew.values() for f in flags}
    stale = set(skew_table) - used
    assert not stale, f"no recipe writes these any more: drop them from the {engine} table: {stale}"
    # each flag taken out really is the recipe's own (in its role args), never one the backend adds
    for k, flags in skew.items():
        recipe_file = corpus / k.split(" [", 1)[0]
        for f in flags:
            assert f.removeprefix("--") in recipe_file.read_text(), (k, f)
    return refused, skew, used


def refusals(refused: Mapping[str, str], engine: str) -> str:
    return f"{engine} refuses rendered commands:\n" + "\n".join(f"{k}: {v}" for k, v in sorted(refused.items()))
