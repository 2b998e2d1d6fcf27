"""The verdict on a corpus's engine commands parsed by the engine's own parser (tests/engine_argv.py
writes the answer; tests/test_vllm_argv.py and tests/test_sglang_argv.py read it)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


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
