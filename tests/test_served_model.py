"""The served model name (issue 46, item 4): what clients send as "model" is the recipe's model as
written unless the recipe names one (srtctl's rules where srtctl has them), the same for every
process of a deployment, and shown by get -o wide, describe and the page. The README's first
recipe is served to the OpenAI Python client exactly as the README writes it."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from conftest import ROOT
from harness import Harness
from reconciler.desired.admission import load_text
from reconciler.desired.render import as_rows, render_units
from reconciler.desired.runtime import runtime_for


def readme_recipe() -> str:
    """The README's "A first recipe" YAML block, as written."""
    text = (ROOT / "README.md").read_text()
    m = re.search(r"```yaml\n# manifests/hello\.yaml\n(.*?)```", text, re.S)
    assert m, "README.md lost its first recipe"
    return m.group(1)


def _recipe(model: str, engine: str = "mocker", frontend: str = "builtin", **engine_keys) -> str:
    eng = {"type": engine, **engine_keys}
    return yaml.safe_dump({"schema": 2, "name": "r", "model": {"path": model}, "resources": {"gpus_per_node": 8},
                           "engine": eng, "roles": {"agg": {"workers": 1, "gpus": 1}}, "frontend": {"type": frontend}})


@pytest.mark.parametrize("model, engine, extra, want", [
    ("Qwen/Qwen3-0.6B", "mocker", {}, "Qwen/Qwen3-0.6B"),  # as written: the README's recipe
    ("hf:Qwen/Qwen3-0.6B", "mocker", {}, "Qwen/Qwen3-0.6B"),  # srtctl names no mocker model: hf: is the source
    ("hf:Qwen/Qwen3-0.6B", "sglang", {}, "Qwen3-0.6B"),  # srtctl's rule for the real engines
    ("/models/qwen3-0.6b/", "mocker", {}, "qwen3-0.6b"),  # a local directory: its name, never the path
    ("/models/qwen3-0.6b", "vllm", {}, "qwen3-0.6b"),
    ("Qwen/Qwen3-0.6B", "mocker", {"served_model_name": "chat"}, "chat"),  # the engine knob wins
    ("Qwen/Qwen3-0.6B", "trtllm", {"served_model_name": "chat"}, "chat"),
])
def test_the_default_served_name_and_what_overrides_it(tmp_path, model, engine, extra, want):
    frontend = "dynamo" if engine in ("sglang", "vllm", "trtllm") else "builtin"
    r = load_text(_recipe(model, engine, frontend, **extra), "r.yaml", preflight=False).recipe
    assert runtime_for(r, tmp_path).served_model_name == want


def _flag(argv: list[str], *names: str) -> str | None:
    for n in names:
        if n in argv:
            return argv[argv.index(n) + 1]
    return None


def test_every_process_of_the_readme_recipe_serves_one_name(tmp_path):
    """The mocker workers, the built-in router and the frontend's canary ask for the same name."""
    r = load_text(readme_recipe(), "hello.yaml").recipe
    rows = as_rows(render_units(r, None, tmp_path))
    workers = [x for x in rows if x["role"] == "agg"]
    router = next(x for x in rows if x["role"] == "frontend")
    assert len(workers) == 2
    assert {_flag(w["argv"], "--model-name") for w in workers} == {"Qwen/Qwen3-0.6B"}
    assert _flag(router["argv"], "--model-name") == "Qwen/Qwen3-0.6B"


@pytest.mark.parametrize("model, container", [("hf:Qwen/Qwen3-0.6B", False), ("/models/qwen3-0.6b", True)])
def test_dynamo_mocker_is_told_the_name_when_its_model_path_is_not_it(tmp_path, model, container):
    """Dynamo serves the path it is given unless told a name: a Hugging Face id is its own name (the
    argv stays srtctl's), a local directory (mounted at /model in a container) is not."""
    doc = yaml.safe_load(_recipe(model, frontend="dynamo"))
    if container:
        doc["model"]["container"] = "/images/dynamo.sqsh"
    r = load_text(yaml.safe_dump(doc), "r.yaml", preflight=False).recipe
    rt = runtime_for(r, tmp_path)
    worker = next(x for x in as_rows(render_units(r, None, tmp_path)) if x["role"] == "agg")
    assert "dynamo.mocker" in worker["argv"]
    if rt.served_model_name == rt.model_path:
        assert "--model-name" not in worker["argv"]
    else:
        assert _flag(worker["argv"], "--model-name") == rt.served_model_name == "qwen3-0.6b"


@pytest.fixture
def h(tmp_path):
    harness = Harness(tmp_path, "slurm")
    yield harness
    harness.cleanup()


@pytest.mark.slurm
def test_the_readme_first_recipe_answers_the_openai_client(h):
    """README, "A first recipe": the file as written (under a unique name), `reconciler get`, the
    curl body, and the OpenAI Python client asking for the model the recipe names."""
    import openai

    from helpers import post

    name = h.name("hello")
    (h.manifests / f"{name}.yaml").write_text(readme_recipe().replace("name: hello", f"name: {name}", 1))
    h.start()
    g = h.wait_ready(name, timeout=120)
    assert g["servedModel"] == "Qwen/Qwen3-0.6B" and g["endpoint"], g
    # `reconciler get` prints what the README shows: its columns, and this deployment's row in them
    shown = re.search(r"\$ reconciler get\n(.*?)\n(.*?)\n", (ROOT / "README.md").read_text()).groups()
    got = h.cli("get", name).stdout.splitlines()
    assert got[0].split() == shown[0].split(), (got[0], shown[0])
    row = dict(zip(got[0].split(), got[1].split()))
    assert (row["READY"], row["UP-TO-DATE"], row["AVAILABLE"], row["STATUS"]) == ("agg:2/2", "2", "2", "Ready"), got
    assert row["ENDPOINT"] == g["endpoint"], got
    wide = h.cli("get", name, "-o", "wide")
    assert wide.returncode == 0 and "MODEL" in wide.stdout and "Qwen/Qwen3-0.6B" in wide.stdout, wide.stdout
    desc = h.cli("describe", name)
    assert "Model: Qwen/Qwen3-0.6B" in desc.stdout, desc.stdout
    st = json.loads((h.state / name / "status.json").read_text())
    assert st["servedModel"] == "Qwen/Qwen3-0.6B"

    client = openai.OpenAI(base_url=g["endpoint"] + "/v1", api_key="none", max_retries=0, timeout=30)
    assert "Qwen/Qwen3-0.6B" in [m.id for m in client.models.list().data]
    out = client.chat.completions.create(model="Qwen/Qwen3-0.6B", max_tokens=8,
                                         messages=[{"role": "user", "content": "hi"}])
    assert out.model == "Qwen/Qwen3-0.6B" and out.choices and out.choices[0].message.content
    # the README's curl sends no model at all: answered too
    code, body = post(g["endpoint"] + "/v1/chat/completions",
                      {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8})
    assert code == 200, body
    with pytest.raises(openai.NotFoundError):  # a name the deployment does not serve is refused, not guessed
        client.chat.completions.create(model="Qwen3-0.6B", max_tokens=4, messages=[{"role": "user", "content": "hi"}])


def test_the_status_page_shows_the_served_name():
    from reconciler.ui import model
    from reconciler.ui.page import PAGE

    d = model.deployment("r", {"phase": "Ready", "servedModel": "Qwen/Qwen3-0.6B", "workers": []}, {}, None)
    assert d["servedModel"] == "Qwen/Qwen3-0.6B"
    assert "d.servedModel" in PAGE and "<th>MODEL</th>" in PAGE
