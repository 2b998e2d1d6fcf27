"""The hostile-input probe list: each row is an input -> the error users see, the exit code.

`reconciler validate` runs in a subprocess under an address-space limit (ulimit -v), so a
probe that would exhaust memory fails the test instead of the machine. The same files in
a running reconciler's manifests/ leave what runs untouched: tests/test_e2e.py::
test_hostile_manifests_beside_a_running_recipe.
"""

from __future__ import annotations

import json
import os
import time
import resource
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

GOOD = "name: {name}\nmodel: {{path: m}}\nengine: mocker\nroles: {{agg: {{workers: 1, gpus: 1}}}}\n"
MEMORY_LIMIT = 1 << 30  # 1 GiB of address space for validate

ALIAS_BOMB = "name: bomb\nmodel: {path: m}\nengine: mocker\nroles: {agg: {workers: 1, gpus: 1}}\n" + "".join(
    f"{c}: &{c} [{', '.join([f'*{p}'] * 9) if p else ', '.join(['lol'] * 9)}]\n"
    for p, c in zip([None, *"abcdefgh"], "abcdefghi"))


def nested(depth: int) -> str:
    return GOOD.format(name="deep") + "environment:\n" + "".join("  " * i + f"k{i}:\n" for i in range(depth)) + \
        "  " * depth + "x: 1\n"


PROBES = [
    # (id, file content (str, bytes or a callable building it), expected substring, exit code)
    ("empty", "", "empty file", 1),
    ("binary", bytes(range(256)) * 4, "not a text file", 1),
    ("non-utf8", "name: caf\xe9\n".encode("latin-1"), "not a text file", 1),
    ("tabs", "name: t\nmodel:\n\tpath: m\n", "YAML syntax error", 1),
    ("duplicate key", GOOD.format(name="d") + "name: again\n", "duplicate key 'name'", 1),
    ("alias bomb", ALIAS_BOMB, "YAML expands to more than", 1),
    ("50 MB file", lambda: "#" * (50 << 20) + "\n" + GOOD.format(name="big"), "a recipe may be at most", 1),
    ("deep nesting (block)", nested(60), "nested more than", 1),
    ("deep nesting (flow)", "name: f\nx: " + "[" * 5000 + "]" * 5000 + "\n", "nesting depth", 1),
    ("top-level list", "- name: x\n", "expected a mapping", 1),
    ("unknown key at depth", GOOD.format(name="u").replace("gpus: 1}", "gpus: 1, restart: {polcy: never}}"),
     "roles.agg.restart.polcy", 1),
    ("wrong type", GOOD.format(name="w").replace("workers: 1", "workers: two"), "roles.agg.workers", 1),
    ("huge count", GOOD.format(name="h").replace("workers: 1", "workers: 1000000000"), "roles.agg.workers", 1),
    ("huge nodes", GOOD.format(name="h").replace("workers: 1", "workers: 1, nodes: 99999999"), "roles.agg.nodes", 1),
    ("reserved name", GOOD.format(name="ports.json"), "'ports.json' is reserved", 1),
    # every entry at the top of state/ (recipe/bounds.py), and a variant of one (a file set aside)
    *((f"reserved {n}", GOOD.format(name=n), f"probe.yaml:1: name: '{n}' is reserved", 1) for n in (
        "quarantine.json", "run.json", "nodes.json", "standby.json", "suspended", "events.jsonl.1",
        "files.json.corrupt-20260101T000000", "cluster-config.json")),
    ("NUL in a value", GOOD.format(name="n") + 'environment: {X: "a\\0b"}\n', "environment.X: a NUL byte", 1),
    ("NUL in the file", GOOD.format(name="n").encode() + b"#\x00\n", "NUL byte", 1),
    ("NaN", GOOD.format(name="nan").replace("engine: mocker", "engine: {type: mocker, speedup_ratio: .nan}"),
     "speedup_ratio", 1),
    ("infinite interval", GOOD.format(name="inf") + "health_check: {interval_seconds: .inf}\n", "finite", 1),
    ("negative max_num_seqs", GOOD.format(name="neg").replace("gpus: 1}", "gpus: 1, args: {max-num-seqs: -4}}"),
     "roles.agg.args.max-num-seqs: expected a number > 0", 1),
    ("block_size 0", GOOD.format(name="b0").replace("gpus: 1}", "gpus: 1, args: {block_size: 0}}"),
     "block_size: expected a number > 0", 1),
    # the options that carry the reconciler's labels, the job's shape and its logs (docs/recipes.md)
    ("sbatch option key with '='", GOOD.format(name="o1") + "sbatch_directives: {'comment=x': ''}\n",
     "sbatch_directives.comment=x: expected an sbatch long option", 1),
    ("sbatch abbreviation of an owned option", GOOD.format(name="o2") + "sbatch_directives: {comm: x}\n",
     "sbatch --comment is set by the reconciler", 1),
    ("sbatch job-name", GOOD.format(name="o3") + "sbatch_directives: {job-name: x}\n",
     "sbatch --job-name is set by the reconciler", 1),
    # options are allowed by name (issue 48): who runs the job, what it reads, writes or runs, jobs unseen
    *((f"sbatch {k}", GOOD.format(name="o4") + f"sbatch_directives: {{{k}: {v}}}\n",
       f"sbatch_directives.{k}: sbatch --{k} is not an option a recipe may pass", 1)
      for k, v in (("uid", "nobody"), ("gid", "0"), ("chdir", "/"), ("error", "/etc/x"), ("array", "1-44"),
                   ("clusters", "other"), ("hold", "''"), ("reboot", "''"), ("export", "ALL"), ("uid=0", "x"))
      if "=" not in k),
    *((f"srun {k}", GOOD.format(name="o5") + f"srun_options: {{{k}: {v}}}\n",
       f"srun_options.{k}: srun --{k} is not an option a recipe may pass", 1)
      for k, v in (("prolog", "/usr/bin/env"), ("epilog", "/usr/bin/env"), ("task-prolog", "/x"), ("error", "/x"),
                   ("input", "/etc/shadow"), ("chdir", "/"), ("uid", "nobody"), ("multi-prog", "''"))),
    ("role srun prolog", GOOD.format(name="o6").replace("gpus: 1}", "gpus: 1, srun_options: {prolog: /x}}"),
     "roles.agg.srun_options.prolog: srun --prolog is not an option", 1),
    ("srtctl's own options", GOOD.format(name="o7") + "sbatch_directives: {cpus-per-gpu: '36', mem: 0, "
     "mail-type: 'END,FAIL', constraint: volta}\nsrun_options: {mem: '0', cpu-bind: none, mpi: pmix}\n", "valid", 0),
    ("time_min longer than the limit", GOOD.format(name="t1") + "slurm: {time_limit: '10', time_min: '20'}\n",
     "slurm.time_min: '20' is longer than slurm.time_limit '10'", 1),
    ("time_min under a minute", GOOD.format(name="t2") + "slurm: {time_min: '0:30'}\n",
     "slurm.time_min: expected a time of at least one minute", 1),
    ("time_min not a time", GOOD.format(name="t3") + "slurm: {time_min: soon}\n",
     "slurm.time_min: expected a Slurm time limit", 1),
    ("reservation with a space", GOOD.format(name="t4") + "slurm: {reservation: 'a b'}\n",
     "slurm.reservation: expected a Slurm reservation name", 1),
    ("exclude that is no hostlist", GOOD.format(name="o4") + "sbatch_directives: {exclude: 'n[1-3'}\n",
     "exclude: expected a Slurm hostlist", 1),
    ("srun jobid", GOOD.format(name="o5") + "srun_options: {jobid: '12345'}\n", "srun_options.jobid: srun --jobid", 1),
    ("srun output", GOOD.format(name="o6") + "srun_options: {output: /dev/null}\n", "srun --output is set", 1),
    ("role srun job-name", GOOD.format(name="o7").replace("gpus: 1}", "gpus: 1, srun_options: {job-name: x}}"),
     "roles.agg.srun_options.job-name: srun --job-name", 1),
    ("service srun open-mode",
     GOOD.format(name="o8") + "services:\n  - {name: s, command: [x], srun_options: {open-mode: truncate}}\n",
     "services.0.srun_options.open-mode: srun --open-mode", 1),
    ("Slurm options of the recipe's own", GOOD.format(name="o9") + "sbatch_directives: {cpus-per-gpu: 4, mem: 0, "
     "requeue: '', exclude: 'n[1-3],g7'}\nsrun_options: {cpus-per-task: 4, kill-on-bad-exit: 1, mpi: pmix}\n",
     "valid", 0),
    # a flag with its value in the key slips past the checks on the flags the reconciler sets
    ("args key with '='", GOOD.format(name="a1").replace("gpus: 1}", "gpus: 1, args: {'port=5555': true}}"),
     "roles.agg.args.port=5555: expected a flag name", 1),
    ("frontend args key with '='", GOOD.format(name="a2") + "frontend: {type: builtin, args: {'http-port=9': true}}\n",
     "frontend.args.http-port=9: expected a flag name", 1),
    # a file probe's marker is removed before each launch: a relative one stays in the recipe's directory
    ("file probe out of the directory", GOOD.format(name="f1") + "services:\n  - {name: s, command: [x], "
     "readiness: {file: {path: '../../x'}}}\n", "services.0.readiness.file.path: a relative path stays under", 1),
    ("absolute file marker, ordinary patterns", GOOD.format(name="f3") + "services:\n  - {name: s, command: "
     "[sleep, '30'], readiness: {file: {path: /shared/marker.ready}}}\nhealth_check: {extra_fatal_log_patterns: "
     "['CUDA error: .*', '(OOM|out of memory)+']}\n", "valid", 0),
    ("negative service timeout", GOOD.format(name="f2") + "services:\n  - {name: s, command: [x], "
     "readiness: {port: 9000, timeout_seconds: -1}}\n", "services.0.readiness.timeout_seconds", 1),
    # a log pattern is matched in the tick by RE2 (linear time): what RE2 cannot match is refused
    ("backreference in a fatal pattern", GOOD.format(name="r1") + "health_check: {extra_fatal_log_patterns: "
     "['(a)\\1']}\n", "health_check.extra_fatal_log_patterns: '(a)\\\\1' cannot be matched in linear time", 1),
    ("lookahead in a log probe", GOOD.format(name="r2") + "services:\n  - {name: s, command: [x], "
     "readiness: {log: {pattern: 'a(?=b)'}}}\n", "services.0.readiness.log.pattern: 'a(?=b)' cannot be matched", 1),
    ("(a|aa)+b in a log probe", GOOD.format(name="r3") + "services:\n  - {name: s, command: [x], "
     "readiness: {log: {pattern: '(a|aa)+b'}}}\n", "valid", 0),
    ("20000 shadow engines", GOOD.format(name="s1").replace(
        "engine: mocker", "engine: {type: mocker, failover: {shadow_engines: 20000}}"), "engine.failover.shadow_engines", 1),
    # values the reconciler would overwrite in silence, or coerce (issue 32)
    ("role env VLLM_PORT", GOOD.format(name="e1").replace("gpus: 1}", "gpus: 1, env: {VLLM_PORT: '5000'}}"),
     "roles.agg.env.VLLM_PORT: VLLM_PORT is set by the reconciler", 1),
    ("environment DYN_SYSTEM_PORT", GOOD.format(name="e2") + "environment: {DYN_SYSTEM_PORT: '9090'}\n",
     "environment.DYN_SYSTEM_PORT: DYN_SYSTEM_PORT is set by the reconciler", 1),
    ("kv_events endpoint", GOOD.format(name="e3").replace("gpus: 1}", "gpus: 1, kv_events: {endpoint: 'tcp://*:1'}}"),
     "roles.agg.kv_events: kv_events.endpoint is the reconciler's", 1),
    ("kv_events own keys", GOOD.format(name="e4").replace("gpus: 1}", "gpus: 1, kv_events: {topic: t}}"), "valid", 0),
    ("empty engine_python", GOOD.format(name="e5") + "reconcile: {engine_python: ''}\n",
     "reconcile.engine_python: expected one command or path", 1),
    ("relative discovery_dir", GOOD.format(name="e6") + "reconcile: {discovery: file, discovery_dir: shared/d}\n",
     "reconcile.discovery_dir: expected an absolute directory", 1),
    ("failover restart 1", GOOD.format(name="e7").replace("engine: mocker", "engine: {type: mocker, failover: "
     "{restart: 1}}"), "engine.failover.restart: expected always, never, on-failure or a boolean, found 1", 1),
    ("failover restart true", GOOD.format(name="e8").replace("engine: mocker", "engine: {type: mocker, failover: "
     "{restart: true}}"), "valid", 0),
    ("scaled to zero", GOOD.format(name="z").replace("workers: 1", "workers: 0"), "valid", 0),
    ("shell metacharacters are data", lambda: GOOD.format(name="sh") + f'environment: {{X: "$(touch {PWNED}); \'x\\""}}\n',
     "valid", 0),
]
PWNED = f"/tmp/pwned-{uuid.uuid4().hex}"


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def validate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reconciler.cli", "validate", *args], capture_output=True, text=True,
                          timeout=120, preexec_fn=_limit)


@pytest.mark.parametrize("what, content, expected, code", PROBES, ids=[p[0] for p in PROBES])
def test_probe(tmp_path, what, content, expected, code):
    content = content() if callable(content) else content
    f = tmp_path / "probe.yaml"
    f.write_bytes(content if isinstance(content, bytes) else content.encode())
    r = validate(str(f))
    assert r.returncode == code, (r.stdout, r.stderr)
    assert expected in r.stdout + r.stderr, (r.stdout, r.stderr)
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "reconciler.cli", "render", str(f), "-o", "json"], capture_output=True,
                       text=True, timeout=120, preexec_fn=_limit)
    assert r.returncode == code and "Traceback" not in r.stderr, r.stderr
    assert not Path(PWNED).exists(), "recipe text reached a shell"


def test_symlinks_inside_are_followed_and_out_of_the_directory_are_refused(tmp_path):
    m = tmp_path / "manifests"
    (m / "sub").mkdir(parents=True)
    outside = tmp_path / "elsewhere.yaml"
    outside.write_text(GOOD.format(name="outside"))
    (m / "sub" / "real.yaml").write_text(GOOD.format(name="real"))
    (m / "inside.yaml").symlink_to(m / "sub" / "real.yaml")  # another folder: another namespace
    (m / "sub" / "alias.yaml").symlink_to(m / "sub" / "real.yaml")  # the same folder: the same recipe
    (m / "out.yaml").symlink_to(outside)
    (m / "dir.yaml").mkdir()  # a directory named *.yaml is a directory: scanned like any other
    (m / "dir.yaml" / "deeper.yaml").write_text(GOOD.format(name="deeper"))
    r = validate(str(m), "-o", "json")
    res = {Path(x["path"]).relative_to(m).as_posix(): x for x in json.loads(r.stdout)}
    assert res["inside.yaml"]["valid"] and res["dir.yaml/deeper.yaml"]["valid"]  # followed: inside manifests/
    # a link and its target in one folder are one recipe twice: the first in scan order wins (as in
    # `run`); the top-level link is the same name in another namespace, so a deployment of its own
    assert res["sub/alias.yaml"]["valid"] and res["inside.yaml"]["namespace"] == ""
    assert not res["sub/real.yaml"]["valid"] and "also used by" in res["sub/real.yaml"]["error"]
    assert not res["out.yaml"]["valid"] and "symlink leading out of" in res["out.yaml"]["error"]
    assert r.returncode == 1


def test_two_files_with_one_name_the_first_wins_and_both_are_named(tmp_path):
    m = tmp_path / "m"
    m.mkdir()
    (m / "a.yaml").write_text(GOOD.format(name="same"))
    (m / "b.yaml").write_text(GOOD.format(name="same").replace("workers: 1", "workers: 2"))
    r = validate(str(m))
    assert r.returncode == 0  # a warning: run keeps a.yaml and reports b.yaml
    assert f"ignored {m / 'b.yaml'}: recipe name 'same' is also used by {m / 'a.yaml'}" in r.stdout
    assert "1 valid, 0 invalid, 1 ignored" in r.stderr  # shadowed, not wrong in itself (docs/recipes.md)


def test_a_file_named_after_a_state_file_and_a_key_too_long_for_state_are_refused_located(tmp_path):
    """Issue 48: quarantine.json.yaml (a name taken from the file) and a 200-character name in a
    64-character folder both validated, then failed every pass of run."""
    m = tmp_path / "m"
    (m / ("f" * 64)).mkdir(parents=True)
    (m / "quarantine.json.yaml").write_text(GOOD.format(name="x").split("\n", 1)[1])
    (m / ("f" * 64) / "long.yaml").write_text(GOOD.format(name="n" * 200))
    (m / ("f" * 64) / "short.yaml").write_text(GOOD.format(name="n" * 100))  # 165 bytes: fits
    r = validate(str(m))
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert f"invalid {m / 'quarantine.json.yaml'}: name: 'quarantine.json' is reserved" in r.stdout
    assert f"invalid {m / ('f' * 64) / 'long.yaml'}:1: name: folder and name make the key" in r.stdout
    assert "265 bytes; folder + '@' + name may be at most 200" in r.stdout
    assert "1 valid, 2 invalid" in r.stderr


def test_run_with_every_probe_beside_a_good_recipe_within_the_memory_budget(tmp_path):
    """`run` under the same address-space limit: the probes are reported, the good recipe converges."""
    m, state = tmp_path / "manifests", tmp_path / "state"
    m.mkdir()
    for i, (_what, content, _expected, _code) in enumerate(PROBES):
        content = content() if callable(content) else content
        (m / f"probe-{i:02d}.yaml").write_bytes(content if isinstance(content, bytes) else content.encode())
    (m / "zz-good.yaml").write_text(GOOD.format(name="good-one"))
    for f in m.iterdir():  # older than the debounce window: applied on the first pass
        os.utime(f, (time.time() - 60, time.time() - 60))
    base = [sys.executable, "-m", "reconciler.cli", "run", "--once", "--driver", "local", "--state", str(state)]
    try:
        r = subprocess.run([*base, "--manifests", str(m)], capture_output=True, text=True, timeout=120,
                           preexec_fn=_limit, cwd=tmp_path)
        assert r.returncode == 0, r.stderr[-3000:]
        assert "Traceback" not in r.stderr and "tick failed" not in r.stderr, r.stderr[-3000:]
        events = [json.loads(l) for l in (state / "events.jsonl").read_text().splitlines()]
        assert any(e["kind"] == "SubmitAlloc" and e["recipe"] == "good-one" for e in events)
        status = json.loads((state / "good-one" / "status.json").read_text())
        assert not any(c["type"] == "Invalid" and c["status"] == "True" for c in status["conditions"])
        assert not Path(PWNED).exists(), "recipe text reached a shell"
    finally:
        empty = tmp_path / "empty"
        empty.mkdir()
        subprocess.run([*base, "--manifests", str(empty), "--allow-empty"], capture_output=True, timeout=120,
                       cwd=tmp_path)


def test_a_fifo_or_symlink_loop_is_refused_by_validate_and_render_and_reported_by_run(tmp_path):
    """A FIFO named on the command line must not hang validate/render; run says what it skipped."""
    import os
    import subprocess
    import sys

    m = tmp_path / "m"
    m.mkdir()
    os.mkfifo(m / "pipe.yaml")
    (m / "loop.yaml").symlink_to(m / "loop.yaml")
    for cmd in ("validate", "render"):
        for entry, what in (("pipe.yaml", "a FIFO"), ("loop.yaml", "a symlink loop")):
            r = subprocess.run([sys.executable, "-m", "reconciler.cli", cmd, str(m / entry)], capture_output=True,
                               text=True, timeout=30)
            assert r.returncode != 0 and f"{m / entry}: {what}" in r.stdout + r.stderr, (cmd, r.stdout, r.stderr)
    from reconciler.drivers.local import LocalDriver
    from reconciler.shell.loop import Controller

    c = Controller(m, tmp_path / "state", LocalDriver(tmp_path / "state"), allow_empty=True)
    for _ in range(2):
        c.step(5.0)
    events = [json.loads(l) for l in (tmp_path / "state" / "events.jsonl").read_text().splitlines()]
    skipped = sorted(e["message"] for e in events if e["kind"] == "FileSkipped")
    assert skipped == [f"{m / 'loop.yaml'}: a symlink loop, not a recipe file; skipped",
                       f"{m / 'pipe.yaml'}: a FIFO (named pipe), not a recipe file; skipped"]  # once each
