"""The expectation table of core/refusal.py: which srun / engine messages are the recipe's or the
cluster config's own fault (ConfigError, never a node's), and which are not."""

from __future__ import annotations

import pytest

from reconciler.core.refusal import refusal, what_refused

REFUSED = [
    ("srun: unrecognized option '--container-image=nvcr.io/nvidia/x:1'\nTry \"srun --help\" for more information\n",
     "srun: unrecognized option '--container-image=nvcr.io/nvidia/x:1'", "srun option"),
    ("srun: unrecognized option '--container-mounts=/tmp:/tmp'\n", None, "srun option"),
    ("srun: invalid option -- 'Z'\n", None, "srun option"),
    ("srun: error: invalid partition specified: nope\nsrun: error: Unable to allocate resources: Invalid partition "
     "name specified\n", "srun: error: invalid partition specified: nope", "partition"),
    ("sbatch: error: Batch job submission failed: Invalid partition name specified", None, "partition"),
    ("srun: error: Unable to create step for job 1034: Invalid feature specification", None, "feature"),
    ("sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified",
     None, "account"),
    ("srun: error: Unable to create step for job 7: Invalid generic resource (gres) specification", None, "gres"),
    ("slurmstepd: error: pyxis: failed to import docker image\nslurmstepd: error: pyxis: printing enroot log file:",
     "slurmstepd: error: pyxis: failed to import docker image", "container image"),
    ("pyxis: importing docker image: nvcr.io/nvidia/nope:1\n[ERROR] URL https://nvcr.io/v2/nvidia/nope/manifests/1 "
     "returned error code: 404 Not Found", "[ERROR] URL https://nvcr.io/v2/nvidia/nope/manifests/1 returned error "
     "code: 404 Not Found", "container image"),
    ("INFO 12-07 starting\napi_server.py: error: unrecognized arguments: --no-such-flag 3\n",
     "api_server.py: error: unrecognized arguments: --no-such-flag 3", "engine flag"),
    ("python -m reconciler.mocker: error: argument --speedup-ratio: invalid float value: 'fast'", None, "engine flag"),
    ("launch_server.py: error: argument --tp-size: expected one argument", None, "engine flag"),
    ("python -m reconciler.mocker: error: the following arguments are required: --port", None, "engine flag"),
    ("Usage: trtllm-serve serve [OPTIONS] MODEL\nTry 'trtllm-serve serve --help' for help.\n\n"
     "Error: No such option: --bogus", "Error: No such option: --bogus", "engine flag"),
    ("error: unexpected argument '--bogus' found\n\nUsage: dynamo-run [OPTIONS]", "error: unexpected argument '--bogus' found",
     "engine flag"),
]

NOT_REFUSED = [
    "",  # nothing said at all (a step cancelled outside the reconciler)
    "srun: error: Unable to confirm allocation for job 1: Invalid job id specified",  # the allocation went away
    "srun: error: Node failure on vm\nsrun: error: vm: task 0: Killed",
    "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
    "slurmstepd: error: *** STEP 1034.3 ON vm CANCELLED AT 2026-12-07T02:58:13 ***",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error",
    "OSError: [Errno 98] Address already in use",
    "srun: error: Unable to create step for job 9: Requested node configuration is not available",
    "ERROR 12-07 the model's max seq len (40960) is larger than the KV cache can hold",  # a real limit, no flag
]


@pytest.mark.parametrize("text,line,what", REFUSED)
def test_a_refusal_is_named_by_its_first_line(text, line, what):
    got = refusal(text)
    assert got == (line or text.strip().splitlines()[0].strip())
    assert what_refused(got) == what


@pytest.mark.parametrize("text", NOT_REFUSED)
def test_a_fault_that_is_not_the_recipes_is_not_a_refusal(text):
    assert refusal(text) is None


def test_the_line_is_bounded():
    assert len(refusal("srun: unrecognized option '--x=" + "y" * 1000 + "'")) == 300
