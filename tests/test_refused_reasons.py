"""get's / describe's REASON for a unit refused for the recipe's own reason (shell/reasons.py over
shell/refused.py), from the files the Slurm driver and the launcher write."""

from __future__ import annotations

from reconciler.core.refusal import LAUNCH_HEADER
from reconciler.shell import reasons

SRUN = "srun: unrecognized option '--container-image=nvcr.io/nvidia/x:1'"


def row(phase="BackOff", code=None, steps=()):
    return {"name": "agg_0", "role": "agg", "phase": phase, "ready": False, "restarts": 3, "steps": list(steps),
            "lastExit": {"code": code, "at": "2026-01-01T00:00:00Z"} if code is not None else None}


def test_srun_refusing_the_launch_is_a_config_error_in_sruns_words(tmp_path):
    logs = tmp_path / "r" / "logs"
    logs.mkdir(parents=True)
    (logs / "agg_0.0.srun").write_text(f"{LAUNCH_HEADER}abc rcl:x:r:agg:0:0:abc\n{SRUN}\nTry \"srun --help\"\n" * 3)
    word, msg = reasons.unit_reason(row(), {"slot": 0}, tmp_path, "r", ())
    assert word == "ConfigError" and msg.startswith(SRUN + " (refused for the recipe's")
    # the last launch failed otherwise (the allocation went away): not the recipe's fault
    with (logs / "agg_0.0.srun").open("a") as f:
        f.write(f"{LAUNCH_HEADER}abc rcl:x:r:agg:0:0:abc\nsrun: error: Unable to confirm allocation for job 7: "
                "Invalid job id specified\n")
    word, msg = reasons.unit_reason(row(), {"slot": 0}, tmp_path, "r", ())
    assert word == "CrashLoopBackOff", msg


def test_an_engine_refusing_a_flag_is_a_config_error_with_its_exit_and_line(tmp_path):
    logs = tmp_path / "r" / "logs"
    logs.mkdir(parents=True)
    (logs / "agg_0.0.log").write_text("INFO starting\nusage: api_server.py [-h]\n"
                                      "api_server.py: error: unrecognized arguments: --no-such-flag\n")
    (logs / "agg_0.0.exit").write_text("2 1767225600\n")
    word, msg = reasons.unit_reason(row(code=2), {"slot": 0}, tmp_path, "r", ())
    assert word == "ConfigError"
    assert msg.startswith("exited 2 at 2026-01-01T00:00:00Z; log: api_server.py: error: unrecognized arguments: "
                          "--no-such-flag (refused"), msg
    (logs / "agg_0.0.log").write_text("Traceback (most recent call last):\nRuntimeError: CUDA error: out of memory\n")
    word, msg = reasons.unit_reason(row(code=1), {"slot": 0}, tmp_path, "r", ())
    assert word == "CrashLoopBackOff" and "log: RuntimeError: CUDA error" in msg
