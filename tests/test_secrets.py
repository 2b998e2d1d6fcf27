"""Secrets stay secret (issue 48, item 5), the pure and file-level parts: what is redacted, how
state files are written (0600 / 0700, no symlink followed), the launcher's environment."""

from __future__ import annotations

import json
import os
import stat
import subprocess

import pytest

from reconciler import fsutil
from reconciler.drivers import redact
from reconciler.drivers.base import LAUNCHER, DriverError, step_env, wrapped_argv
from reconciler.drivers.state import FULL_APPLIED, StateDir
from reconciler.world import Launch


# ---------------------------------------------------------------- which keys are secrets
@pytest.mark.parametrize("key", ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "api_key", "apiKey", "OPENAI_API_KEY",
                                 "AWS_SECRET_ACCESS_KEY", "GOOGLE_APPLICATION_CREDENTIALS", "password", "DB_PASSWD",
                                 "hf-token", "HFTOKEN", "key", "client.secret"])
def test_secret_keys(key):
    assert redact.secret_key(key)


@pytest.mark.parametrize("key", ["max_tokens", "max_new_tokens", "tokenizer", "TOKENIZERS_PARALLELISM",
                                 "kv_cache_dtype", "monkey", "keys_per_block", "model", "PATH"])
def test_keys_that_only_contain_a_word_are_not(key):
    assert not redact.secret_key(key)


RECIPE = """\
name: r  # a comment stays
roles:
  agg: {workers: 1, gpus: 1, env: {HF_TOKEN: hf_flow_1234, A: "1"}}
env:
  HF_TOKEN: "hf_block_1234"   # comment
  MY_PASSWORD: 'p@ss word'
  api_key: sk-plain-1234
  OTHER: plain
extra_args: ["--api-key", "sk-flag-1234", --x, 1]
args:
  - --hf-token
  - tok_block_1234
cmd: vllm serve --api-key=sk-eq-1234 --foo bar
again: hf_flow_1234
max_tokens: 100
"""


def test_every_form_of_a_secret_in_a_recipe_is_redacted():
    out = redact.redact(RECIPE)
    for value in ("hf_flow_1234", "hf_block_1234", "p@ss word", "sk-plain-1234", "sk-flag-1234", "tok_block_1234",
                  "sk-eq-1234"):
        assert value not in out, (value, out)
    # the rest as written: comments, layout, non-secrets
    assert "name: r  # a comment stays" in out and "OTHER: plain" in out and "max_tokens: 100" in out
    assert 'A: "1"' in out and "--x, 1" in out and "--foo bar" in out
    assert "HF_TOKEN: 'REDACTED'   # comment" in out
    import yaml
    assert yaml.safe_load(out)["env"]["HF_TOKEN"] == "REDACTED"  # still YAML


def test_messages_are_redacted_by_key_and_by_known_value():
    assert redact.redact("launch: env HF_TOKEN=abc123def X=1") == "launch: env HF_TOKEN=REDACTED X=1"
    assert redact.redact("http://h/?api_key=abcd1234&x=1") == "http://h/?api_key=REDACTED&x=1"
    assert redact.redact("the engine said hf_zzzz9999", {"hf_zzzz9999"}) == "the engine said REDACTED"


# ---------------------------------------------------------------- last-applied and events
def test_last_applied_is_shown_redacted_and_kept_whole_privately(tmp_path):
    s = StateDir(tmp_path / "state")
    s.write_last_applied("r", RECIPE)
    shown = (tmp_path / "state" / "r" / "last-applied.yaml").read_text()
    assert "hf_block_1234" not in shown and "REDACTED" in shown
    full = tmp_path / "state" / "r" / FULL_APPLIED
    assert full.read_text() == RECIPE and stat.S_IMODE(full.stat().st_mode) == 0o600
    assert s.last_applied("r") == RECIPE  # what a reload of the recipe reads: the real value
    assert StateDir(tmp_path / "state").last_applied("r") == RECIPE  # a restarted reconciler too
    s.event("LaunchFailed", "r", "agg_0: engine printed HF_TOKEN=hf_block_1234 and hf_flow_1234",
            detail="hf_flow_1234")
    (event,) = [json.loads(l) for l in (tmp_path / "state" / "events.jsonl").read_text().splitlines()]
    assert "hf_" not in json.dumps(event), event
    # no secret any more: no second copy
    s.write_last_applied("r", "name: r\n")
    assert not full.exists() and s.last_applied("r") == "name: r\n"


def test_status_is_written_redacted_and_a_settled_one_is_not_rewritten(tmp_path):
    """A condition may quote an engine's refusal line: status.json (get, describe, the page) shows
    no secret's value in its messages, by key or by a value of the recipe's own; names, URLs and
    messages that only look like ``key: value`` are left as they are."""
    s = StateDir(tmp_path / "state")
    s.write_last_applied("r", RECIPE)
    s.write_last_applied("other", "name: other\nenv: {OPENAI_API_KEY: EMPTY-ish}\n")
    status = {"name": "r", "error": "KeyError: 'prefill'", "endpoint": "http://h:1/?api_key=x",
              "conditions": [
                  {"type": "Ready", "message": "agg_0 refused: error: --api-key=sk-live-9999 HF_TOKEN=hf_any_5678"},
                  {"type": "Degraded", "message": "the engine said hf_block_1234 (EMPTY-ish)"},
                  {"type": "Invalid", "message": "/m/api-key-proxy.yaml: recipe.engine: unknown engine"}],
              "workers": [{"name": "agg_0", "url": "http://n:2", "notReadyReason": "exit 1: hf_flow_1234"},
                          {"name": "agg_1", "nodes": ["n"]}]}
    assert s.status_changed("r", status)
    s.write_status("r", status)
    text = (tmp_path / "state" / "r" / "status.json").read_text()
    for secret in ("sk-live-9999", "hf_any_5678", "hf_block_1234", "hf_flow_1234"):
        assert secret not in text, text
    shown = json.loads(text)
    assert [c["message"] for c in shown["conditions"]] == [
        "agg_0 refused: error: --api-key=REDACTED HF_TOKEN=REDACTED",
        "the engine said REDACTED (EMPTY-ish)",  # another recipe's secret is not this one's
        "/m/api-key-proxy.yaml: recipe.engine: unknown engine"]
    assert shown["error"] == "KeyError: 'prefill'" and shown["endpoint"] == "http://h:1/?api_key=x"
    assert shown["workers"][0]["notReadyReason"] == "exit 1: REDACTED" and shown["workers"][1] == {"name": "agg_1", "nodes": ["n"]}
    assert not s.status_changed("r", status)  # the redacted file is what it compares with
    assert s.shown_status("r", {"name": "r"}) == {"name": "r"}


# ---------------------------------------------------------------- state files
def test_state_files_are_private_and_symlinks_refused(tmp_path):
    root = tmp_path / "state"
    fsutil.private_root(root)
    s = StateDir(root)
    s.write_status("r", {"conditions": [], "workers": []})
    s.event("X", "r", "m")
    for p in (root, root / "r"):
        assert stat.S_IMODE(p.stat().st_mode) == 0o700, p
    for p in (root / "r" / "status.json", root / "events.jsonl"):
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
    target = tmp_path / "target"
    target.write_text("precious\n")
    # a directory link planted in state/<r>/: nothing written through it
    (root / "r" / "logs").symlink_to(tmp_path)
    with pytest.raises(fsutil.LinkRefused, match="symbolic link"):
        fsutil.private_file(root / "r" / "logs" / "alloc-0.out")
    assert not (tmp_path / "alloc-0.out").exists()
    with pytest.raises(fsutil.LinkRefused):
        s.write_json(root / "r" / "logs" / "x.json", {})
    # a file link: appended to never
    (root / "events.jsonl").unlink()
    (root / "events.jsonl").symlink_to(target)
    with pytest.raises(fsutil.LinkRefused):
        s.event("X", "r", "m")
    with pytest.raises(fsutil.LinkRefused):
        fsutil.open_append(root / "events.jsonl")
    assert target.read_text() == "precious\n"


def test_an_older_releases_loose_modes_are_narrowed_when_written(tmp_path):
    root = tmp_path / "state"
    (root / "r").mkdir(parents=True, mode=0o755)
    os.chmod(root, 0o755)
    (root / "events.jsonl").write_text("")
    os.chmod(root / "events.jsonl", 0o644)
    fsutil.private_root(root)
    s = StateDir(root)
    s.event("X", "r", "m")
    s.write_status("r", {"conditions": [], "workers": []})
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert stat.S_IMODE((root / "r").stat().st_mode) == 0o700
    assert stat.S_IMODE((root / "events.jsonl").stat().st_mode) == 0o600


# ---------------------------------------------------------------- the launcher
def _run(launch: Launch, tmp_path, extra_env: dict | None = None) -> tuple[subprocess.CompletedProcess, list]:
    argv = wrapped_argv(launch, tmp_path / "st", "STEP")
    env = {**os.environ, **step_env(launch), **(extra_env or {})}
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30), argv


def test_the_launcher_sets_the_environment_it_was_given_by_name(tmp_path):
    value = "s3cr3t 'quoted' $HOME `x` \"q\"\nline2"
    l = Launch(0, ("n",), 1, None, ("/bin/sh", "-c", 'printf "%s|%s|%s" "$HF_TOKEN" "$EMPTY" "$(env | grep -c RCL_ENV_)"'),
               (("HF_TOKEN", value), ("EMPTY", ""), ("PATH", os.environ["PATH"])))
    r, argv = _run(l, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"{value}||0"  # as given, byte for byte; no carrier variable reaches the engine
    assert not any(value in a for a in argv)
    assert (tmp_path / "st").read_text().split()[0] == "0"
    assert stat.S_IMODE((tmp_path / "st").stat().st_mode) == 0o600


def test_a_variable_the_launcher_was_not_given_fails_the_step_loudly(tmp_path):
    l = Launch(0, ("n",), 1, None, ("true",), (("HF_TOKEN", "x"),))
    argv = wrapped_argv(l, tmp_path / "st", "STEP")
    r = subprocess.run(argv, capture_output=True, text=True, timeout=30)  # no step_env: srun did not pass it
    assert r.returncode == 96 and "HF_TOKEN was not passed to the step" in r.stderr, (r.returncode, r.stderr)


def test_a_name_the_shell_cannot_set_is_refused():
    with pytest.raises(DriverError, match="not a shell name"):
        wrapped_argv(Launch(0, ("n",), 1, None, ("true",), (("A-B", "1"),)), "/s", "STEP")
    assert LAUNCHER.count("RCL_ENV_") >= 1
