"""`reconciler render -o json` of every corpus recipe and example, for the byte-identity check of the
desired-state pipeline (tests/test_render_snapshot.py).

The snapshot was taken before the pipeline was restructured; regenerate it only for an intended
change of what a recipe launches:  python tests/render_snapshot.py  (writes tests/snapshots/).
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import tempfile
from pathlib import Path

from click.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = ROOT / "tests" / "snapshots" / "corpus-render.json.gz"
PYTHON = "/opt/python/bin/python3"  # argv carries the interpreter: pinned so a render is machine-independent


def corpus_dir() -> Path:
    return Path(os.environ.get("RECONCILER_CORPUS", ROOT.parent / "shared" / "corpus"))


def recipe_files() -> list[tuple[str, Path]]:
    corpus = corpus_dir()
    files = [(f"corpus/{p.relative_to(corpus)}", p)
             for sub in ("srt-slurm-v1", "srt-slurm-v2") for p in sorted((corpus / sub).rglob("*.yaml"))]
    files += [(f"examples/{p.name}", p) for p in sorted((ROOT / "examples").glob("*.yaml"))]
    return files


def render_all() -> dict[str, str]:
    """file -> what `reconciler render FILE -o json --state /state` prints (exit code prefixed when not 0)."""
    from reconciler.cli import cli

    runner = CliRunner()
    corpus = str(corpus_dir().resolve())
    old = sys.executable
    sys.executable = PYTHON
    env = {"SRTSLURM_CONFIG": ""}
    try:
        out = {}
        here = os.getcwd()
        with tempfile.TemporaryDirectory() as tmp:
            os.chdir(tmp)  # no srtslurm.yaml is found by walking up from the working directory
            try:
                for key, path in recipe_files():
                    r = runner.invoke(cli, ["render", str(path.resolve()), "-o", "json", "--state", "/state"], env=env)
                    text = r.output if r.exit_code == 0 else f"exit {r.exit_code}\n{r.output}"
                    out[key] = text.replace(corpus, "<corpus>").replace(str(ROOT), "<root>")
            finally:
                os.chdir(here)
        return out
    finally:
        sys.executable = old


def main() -> None:
    renders = render_all()
    SNAPSHOT.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(SNAPSHOT, "wt", encoding="utf-8", compresslevel=9) as f:
        json.dump(renders, f, indent=0, sort_keys=True)
    print(f"{len(renders)} renders -> {SNAPSHOT} ({SNAPSHOT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
