"""sbatch_directives / srun_options are allowed by name (issue 48, item 3): the floor is srtctl's
own uses, and docs/recipes.md lists exactly what the code allows."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from reconciler.recipe.types import SBATCH_ALLOWED, SBATCH_OWNED, SRUN_ALLOWED, SRUN_OWNED

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
DOCS = Path(__file__).resolve().parents[1] / "docs" / "recipes.md"


def _keys(node, section: str, out: set[str]) -> set[str]:
    if isinstance(node, dict):
        for k, v in node.items():
            if k == section and isinstance(v, dict):
                out |= set(v)
            else:
                _keys(v, section, out)
    elif isinstance(node, list):
        for v in node:
            _keys(v, section, out)
    return out


def test_every_option_the_corpus_and_srtctls_docs_use_is_allowed_or_set_by_the_reconciler():
    sbatch, srun = set(), set()
    for f in CORPUS.rglob("*.y*ml"):
        try:
            docs = list(yaml.safe_load_all(f.read_text()))
        except (yaml.YAMLError, UnicodeDecodeError):
            continue
        for d in docs:
            _keys(d, "sbatch_directives", sbatch)
            _keys(d, "srun_options", srun)
    assert sbatch and srun  # the corpus was read
    topology = (CORPUS / "srt-slurm-v2" / "docs" / "topology.md").read_text()
    tables = topology[topology.index("## sbatch_directives"):]
    sbatch |= set(re.findall(r"^\| `([a-z-]+)`", tables[:tables.index("## srun_options")], re.M))
    srun |= set(re.findall(r"^\| `([a-z-]+)`", tables[tables.index("## srun_options"):], re.M))
    assert sbatch - SBATCH_ALLOWED - set(SBATCH_OWNED) == set()
    assert srun - SRUN_ALLOWED - set(SRUN_OWNED) == set()


def test_docs_list_exactly_the_allowed_options():
    text = DOCS.read_text()
    part = text[text.index("- any other `sbatch_directives`"):]
    part = part[:part.index("Refused, for example")]
    names = lambda s: set(re.findall(r"`([a-z-]+)`", s)) - {"sbatch_directives", "srun_options"}  # noqa: E731
    sbatch = part[part.index("`sbatch_directives`:"):part.index("`srun_options`:")]
    assert names(sbatch) == SBATCH_ALLOWED
    assert names(part[part.index("`srun_options`:"):]) == SRUN_ALLOWED
