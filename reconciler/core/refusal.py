"""Was a failure the cluster refusing the recipe (or the cluster config), not a fault of the node? Pure.

A launch that srun refuses for an option it does not know, a partition, account, feature or GRES
that does not exist, a container image pyxis cannot import, or an engine that exits at once on a
flag it does not recognise, fails the same way on every node and every retry: it is the recipe's
(or ``srtslurm.yaml``'s) to fix. Such a failure is shown as ``ConfigError`` with the first line of
srun's or the engine's own message, and is never charged to a node (``core/plan/quarantine.py``).

The patterns are the tools' own words (srun/sbatch of Slurm 23-24, pyxis/enroot, Python's argparse
as vLLM, SGLang and the mocker print it, click as TRT-LLM's ``trtllm-serve`` prints it, clap as
Dynamo's Rust binaries print it). ``tests/core/test_refusal.py`` is the expectation table.
"""

from __future__ import annotations

import re

WORD = "ConfigError"
# the line the Slurm driver writes to a srun file before each launch's output (shell/refused.py)
LAUNCH_HEADER = "# reconciler launch spec="
LINE_MAX = 300  # a message is shown in a REASON column and an event: one line, bounded

# (what was refused, the line that says so); searched line by line, first match wins
REFUSALS: tuple[tuple[str, re.Pattern[str]], ...] = tuple((what, re.compile(p)) for what, p in (
    ("srun option", r"^srun: (unrecognized|invalid) option\b"),
    ("srun option", r"^srun: option '[^']+' (requires|doesn't allow) an argument"),
    ("srun option", r"^srun: error: (Invalid|Unrecognized) .*(option|argument|--[a-z])"),
    ("partition", r"(?i)invalid partition (name )?specified"),
    ("account", r"(?i)invalid account( or account/partition combination)? specified"),
    ("qos", r"(?i)invalid qos specification"),
    ("feature", r"(?i)invalid feature specification"),
    ("gres", r"(?i)invalid generic resource \(gres\) specification"),
    ("container image", r"pyxis: (failed to import docker image|importing docker image: .*(error|fail))"),
    ("container image", r"\[ERROR\] (URL .* returned error code: 40[134]|No such file or directory: .*\.sqsh)"),
    ("container image", r"(?i)(manifest unknown|pull access denied|repository does not exist)"),
    ("engine flag", r"error: unrecogni[sz]ed arguments?: "),
    ("engine flag", r"error: argument [^:]+: (invalid .* value|invalid choice|expected (one|\w+) arguments?)"),
    ("engine flag", r"error: the following arguments are required: "),
    ("engine flag", r"^(Error|error): (No such option|no such option|Got unexpected extra arguments?)\b"),
    ("engine flag", r"^error: (unexpected argument|invalid value) '[^']*'"),
))


def refusal(text: str) -> str | None:
    """The first line of ``text`` (srun's output for one launch, or the head of an engine's log)
    that says the launch was refused for the recipe's or the cluster config's own reason; None
    when nothing in it does (a node fault, a crash, an unknown cause)."""
    for raw in text.splitlines():
        line = raw.strip()
        if line and any(p.search(line) for _, p in REFUSALS):
            return line[:LINE_MAX]
    return None


def what_refused(line: str) -> str | None:
    """What a refusal line is about ("srun option", "partition", "container image", "engine flag")."""
    return next((what for what, p in REFUSALS if p.search(line)), None)
