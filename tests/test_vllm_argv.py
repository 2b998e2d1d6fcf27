"""Every vLLM command rendered from the corpus is one the installed vLLM's own parser accepts.

The corpus (srt-slurm v1 recipes and the schema 2 examples) is rendered as the reconciler
would launch it; each engine command (``vllm serve ...`` and ``python -m dynamo.vllm ...``)
is handed to ``tests/vllm_argv_check.py`` under the Python of .stacks/vllm, which parses it
with vLLM 0.32's ``vllm serve`` parser (or, for Dynamo's worker, vLLM's engine arguments
after the flags Dynamo 1.6.1's own parser owns) and its validation. Nothing is started.
An unknown flag or a bad value fails the test with the recipe and vLLM's message.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.desired.admission import load_file
from reconciler.desired.render import render_units
from reconciler.errors import RecipeError
from support.argv import probe_refusals, refusals, run_check, verdict
from support.vllm import require_vllm

CHECK = Path(__file__).with_name("vllm_argv_check.py")
# Flags the *recipe* writes in its role args (passed through as written, as srtctl does) for the
# older vLLM of its own container: vLLM 0.32 no longer has them. The check takes them out and
# parses the rest of the command, so every other flag is still checked. A refusal of anything
# else -- a flag the backend itself renders, or a new one -- fails the test, and so does an entry
# no recipe writes any more.
RECIPES_OLDER_VLLM = {
    "--disable-log-requests": "removed in vLLM 0.11 (logging is off unless --enable-log-requests)",
    "--compilation-config": "pass_config.enable_fusion/enable_attn_fusion/enable_noop were renamed (fuse_*) in vLLM 0.11",
}


def _engine_argv(argv: tuple[str, ...]) -> list[str] | None:
    """The engine's own command inside a launch's argv (after any wrapper), or None."""
    for i, a in enumerate(argv):
        if a == "serve" and i > 0 and Path(argv[i - 1]).name.startswith("vllm"):
            return list(argv[i - 1:])
        if a == "dynamo.vllm" and i > 0 and argv[i - 1] == "-m":
            return ["python3", *argv[i - 1:]]
    return None


def _rendered(corpus: Path) -> list[dict]:
    items = []
    for f in sorted(p for sub in ("srt-slurm-v1", "srt-slurm-v2") for p in (corpus / sub).rglob("*.yaml")):
        try:
            loaded = load_file(f)
        except RecipeError:
            continue  # refused for a named reason: test_corpus.py holds that list
        for lr in loaded:
            if not any(lr.recipe.engine_for(m).type == "vllm" for m, _ in lr.recipe.roles.items()):
                continue
            for u in render_units(lr.recipe, None, Path("/state")):
                for launch in u.launches:
                    if (argv := _engine_argv(launch.argv)) is not None:
                        rel = f.relative_to(corpus)
                        items.append({"id": f"{rel} [{lr.recipe.name}] {u.role}_{u.index} rank {launch.rank}",
                                      "argv": argv})
    return items


# A few commands of known verdict, parsed in the same run as the corpus's (one start of vLLM's
# Python, a minute under load, instead of two): the parser really parses, an unknown flag and a
# value of the wrong type are refused by name.
PROBES = [{"id": "probe:ok", "argv": ["vllm", "serve", "/m", "--max-model-len", "256", "--dtype", "float32"]},
          {"id": "probe:unknown", "argv": ["vllm", "serve", "/m", "--no-such-flag", "1"]},
          {"id": "probe:value", "argv": ["vllm", "serve", "/m", "--max-model-len", "lots"]},
          {"id": "probe:dyn-ok", "argv": ["python3", "-m", "dynamo.vllm", "--model", "/m", "--disaggregation-mode", "decode",
                                          "--enforce-eager"]},
          {"id": "probe:dyn-bad", "argv": ["python3", "-m", "dynamo.vllm", "--model", "/m", "--tensor-parallel-size", "x"]}]


@pytest.fixture(scope="module")
def checked(corpus):
    """(the corpus's rendered commands, the check's answer for them and the probes)."""
    python = require_vllm()
    items = _rendered(corpus)
    return items, run_check(python, CHECK, {"--disaggregation-mode"}, RECIPES_OLDER_VLLM, items + PROBES)


@pytest.mark.timeout(900)
def test_every_rendered_vllm_command_parses_with_vllms_own_parser(corpus, checked, summary):
    items, out = checked
    serve = sum("serve" in it["argv"][:2] for it in items)
    assert serve >= 5 and len(items) - serve >= 50, f"too few vLLM commands rendered: {serve} serve, {len(items) - serve} dynamo.vllm"
    refused, skew, used = verdict(out, len(PROBES), len(items), corpus, RECIPES_OLDER_VLLM, "vLLM")
    summary(f"vllm argv: {len(items)} engine commands from the corpus ({serve} vllm serve, "
            f"{len(items) - serve} dynamo.vllm) parsed by vLLM 0.32's own parser: {len(items) - len(refused)} accepted, "
            f"{len(skew)} of them once the flags their recipe writes for an older vLLM were taken out "
            f"({', '.join(sorted(used))}), {len(refused)} refused")
    assert not refused, refusals(refused, "vLLM")


@pytest.mark.timeout(900)
def test_the_check_refuses_an_unknown_flag_and_a_bad_value(checked):
    """The parser really parses: an unknown flag and a value of the wrong type are refused by name."""
    refused = probe_refusals(checked[1])
    assert set(refused) == {"probe:unknown", "probe:value", "probe:dyn-bad"}, refused
    assert "--no-such-flag" in refused["probe:unknown"]
    assert "--max-model-len" in refused["probe:value"]
    assert "--tensor-parallel-size" in refused["probe:dyn-bad"]
