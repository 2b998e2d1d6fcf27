"""Every SGLang command rendered from the corpus is one SGLang's own argument parser accepts.

The corpus (srt-slurm v1 recipes and the schema 2 examples) is rendered as the reconciler would
launch it; each engine command (``python3 -m sglang.launch_server ...`` and ``python3 -m
dynamo.sglang ...``) is handed to ``tests/sglang_argv_check.py``, which parses it with SGLang
0.5.23's ``ServerArgs`` parser (for Dynamo's worker: after the flags Dynamo 1.6.1's own parser
owns, as Dynamo hands them over). SGLang's wheel is installed without its dependencies (CUDA
torch, sgl-kernel: gigabytes) and imported by .stacks/vllm's Python, whose CPU torch is enough
for the parser (docs/backends.md). Nothing is started. An unknown flag or a bad value fails the
test with the recipe and SGLang's message.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from programs import STACKS, require_program
from reconciler.desired.admission import load_file
from support.argv import probe_refusals, refusals, run_check, verdict
from reconciler.desired.render import render_units
from reconciler.errors import RecipeError

CHECK = Path(__file__).with_name("sglang_argv_check.py")
PYTHON = STACKS / "vllm" / "bin" / "python"
ENGINES = ("sglang.launch_server", "dynamo.sglang")
# Flags the *recipe* writes in its role args (passed through as written, as srtctl does) for the
# SGLang of its own container (lmsysorg/sglang v0.5.6-0.5.8 for most): SGLang 0.5.23 has none of
# them. The check takes each out and parses the rest of the command, so every other flag is still
# checked. A refusal of anything else -- a flag the backend renders itself, or a new one -- fails
# the test, and so does an entry no recipe writes any more.
RECIPES_OTHER_SGLANG = {
    "--cuda-graph-max-bs": "0.5.23 has --cuda-graph-max-bs-decode and --cuda-graph-max-bs-prefill instead",
    "--cuda-graph-bs": "0.5.23 has --cuda-graph-bs-decode and --cuda-graph-bs-prefill instead",
    "--disable-piecewise-cuda-graph": "removed in 0.5.20; Dynamo 1.6.1 adds it back for dynamo.sglang only",
    "--mamba-scheduler-strategy": "not in 0.5.23",
    "--prefill-round-robin-balance": "not in 0.5.23",
    "--nsa-decode-backend": "not in 0.5.23 (the GLM-5 recipes)",
    "--nsa-prefill-backend": "not in 0.5.23 (the GLM-5 recipes)",
}
# values that differ between the workers and ranks of one recipe and never change a command's
# shape: one command per shape is parsed (2,411 commands are ~400 shapes), the others counted
_PER_PROCESS = {"--port", "--nccl-port", "--node-rank", "--dist-init-addr", "--disaggregation-bootstrap-port",
                "--dump-config-to", "--host"}


def _engine_argv(argv: tuple[str, ...]) -> list[str] | None:
    """The engine's command from its module on (``sglang.launch_server ...``), or None."""
    for i, a in enumerate(argv):
        if a in ENGINES and i > 0 and argv[i - 1] == "-m":
            return list(argv[i:])
    return None


def _shape(argv: list[str]) -> tuple[str, ...]:
    return tuple("*" if i and argv[i - 1] in _PER_PROCESS else a for i, a in enumerate(argv))


def _rendered(corpus: Path) -> tuple[list[dict], int]:
    """(one command per shape, each with the id of the first that has it; how many there were)."""
    shapes: dict[tuple[str, ...], dict] = {}
    total = 0
    for f in sorted(p for sub in ("srt-slurm-v1", "srt-slurm-v2") for p in (corpus / sub).rglob("*.yaml")):
        try:
            loaded = load_file(f)
        except RecipeError:
            continue  # refused for a named reason: test_corpus.py holds that list
        for lr in loaded:
            if not any(lr.recipe.engine_for(m).type == "sglang" for m, _ in lr.recipe.roles.items()):
                continue
            for u in render_units(lr.recipe, None, Path("/state")):
                for launch in u.launches:
                    if (argv := _engine_argv(launch.argv)) is not None:
                        total += 1
                        shapes.setdefault(_shape(argv), {
                            "id": f"{f.relative_to(corpus)} [{lr.recipe.name}] {u.role}_{u.index} rank {launch.rank}",
                            "argv": argv})
    return list(shapes.values()), total


# Commands of known verdict, parsed in the same run as the corpus's: the parser really parses, an
# unknown flag and a value of the wrong type are refused by name, and Dynamo's own flags are not
# handed to SGLang.
PROBES = [{"id": "probe:ok", "argv": ["sglang.launch_server", "--model-path", "/m", "--tp-size", "2",
                                      "--disaggregation-mode", "prefill", "--mem-fraction-static", "0.8"]},
          {"id": "probe:unknown", "argv": ["sglang.launch_server", "--model-path", "/m", "--no-such-flag", "1"]},
          {"id": "probe:value", "argv": ["sglang.launch_server", "--model-path", "/m", "--tp-size", "lots"]},
          {"id": "probe:choice", "argv": ["sglang.launch_server", "--model-path", "/m", "--disaggregation-mode", "sideways"]},
          {"id": "probe:dyn-ok", "argv": ["dynamo.sglang", "--model-path", "/m", "--request-plane", "nats",
                                          "--dump-config-to", "/tmp/c.json", "--disaggregation-mode", "decode"]},
          {"id": "probe:dyn-bad", "argv": ["dynamo.sglang", "--model-path", "/m", "--request-plane", "nats",
                                           "--tensor-parallel-size", "x"]},
          {"id": "probe:dyn-flag-to-sglang", "argv": ["sglang.launch_server", "--model-path", "/m",
                                                      "--request-plane", "nats"]}]


@pytest.fixture(scope="module")
def checked(corpus):
    """(the corpus's commands, one per shape; how many were rendered; the check's answer)."""
    require_program("vllm")
    require_program("sglang-args")
    require_program("dynamo")
    items, total = _rendered(corpus)
    out = run_check(PYTHON, CHECK, {"--request-plane", "--dump-config-to"}, RECIPES_OTHER_SGLANG, items + PROBES,
                    env={**os.environ, "PYTHONPATH": str(STACKS / "sglang-args")})
    return items, total, out


@pytest.mark.timeout(900)
def test_every_rendered_sglang_command_parses_with_sglangs_own_parser(corpus, checked, summary):
    items, total, out = checked
    direct = sum(it["argv"][0] == "sglang.launch_server" for it in items)
    assert direct >= 5 and len(items) - direct >= 50, f"too few SGLang commands: {direct} launch_server, {len(items) - direct} dynamo.sglang"
    refused, skew, used = verdict(out, len(PROBES), len(items), corpus, RECIPES_OTHER_SGLANG, "SGLang")
    summary(f"sglang argv: {total} engine commands from the corpus, {len(items)} shapes ({direct} sglang.launch_server, "
            f"{len(items) - direct} dynamo.sglang) parsed by SGLang 0.5.23's own parser: {len(items) - len(refused)} "
            f"accepted, {len(skew)} of them once the flags their recipe writes for another SGLang were taken out "
            f"({', '.join(sorted(used))}), {len(refused)} refused")
    assert not refused, refusals(refused, "SGLang")


@pytest.mark.timeout(900)
def test_the_check_refuses_an_unknown_flag_a_bad_value_and_a_bad_choice(checked):
    """The parser really parses, and only Dynamo's worker has Dynamo's flags."""
    refused = probe_refusals(checked[2])
    assert set(refused) == {"probe:unknown", "probe:value", "probe:choice", "probe:dyn-bad",
                            "probe:dyn-flag-to-sglang"}, refused
    assert "--no-such-flag" in refused["probe:unknown"]
    assert "--tp-size" in refused["probe:value"]
    assert "--disaggregation-mode" in refused["probe:choice"]
    assert "--tensor-parallel-size" in refused["probe:dyn-bad"]
    assert "--request-plane" in refused["probe:dyn-flag-to-sglang"]
