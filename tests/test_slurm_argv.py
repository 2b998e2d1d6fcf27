"""Golden argv of every Slurm command the driver issues (pure builders; no Slurm needed)."""

from __future__ import annotations

from pathlib import Path

from reconciler.drivers.base import LAUNCHER, step_env, wrapped_argv
from reconciler.drivers.slurm import (
    SEP, parse_jobs, parse_node_states, parse_steps, sbatch_argv, scancel_argv, squeue_jobs_argv, squeue_steps_argv, srun_argv,
)
from reconciler.world import Launch, Unit
from reconciler.world import AllocSpec

LOG = Path("/s/r/logs/alloc-0.out")


def test_squeue_formats():
    assert squeue_jobs_argv("alice") == [
        "squeue", "-h", "-u", "alice", "-O",
        f"JobId:{SEP},Name:{SEP},State:{SEP},Reason:{SEP},NodeList:{SEP},NumNodes:{SEP},Comment:{SEP},TimeLeft:{SEP},SubmitTime:{SEP},"
        f"TimeLimit:{SEP}",
    ]
    assert squeue_steps_argv("alice") == ["squeue", "-h", "-s", "-u", "alice", "-o", f"%i{SEP}%j{SEP}%N"]


def test_sbatch_minimal():
    spec = AllocSpec("r", 0, 0, 2, 0)
    assert sbatch_argv(spec, "me", LOG) == [
        "sbatch", "--parsable", "--job-name=rcl:me:r:a0",
        "--comment=reconciler/v1 owner=me recipe=r alloc=0 start=0 nodes=2 gpus=0",
        "--nodes=2", "--ntasks-per-node=1", "--output=/s/r/logs/alloc-0.out", "--no-requeue",
        "--wrap", "exec sleep infinity",
    ]


def test_sbatch_full_and_directives_cannot_take_over_the_labels():
    spec = AllocSpec("r", 1, 2, 1, 8, partition="batch", account="acct", time_limit="04:00:00",
                     directives=(("exclusive", ""), ("mem", "0"), ("job-name", "evil"), ("nodes", "99"),
                                 ("comment", "x"), ("output", "/tmp/x"), ("parsable", "")))
    assert sbatch_argv(spec, "me", LOG) == [
        "sbatch", "--parsable", "--job-name=rcl:me:r:a1",
        "--comment=reconciler/v1 owner=me recipe=r alloc=1 start=2 nodes=1 gpus=8",
        "--nodes=1", "--ntasks-per-node=1", "--output=/s/r/logs/alloc-0.out", "--no-requeue",
        "--gres=gpu:8", "--partition=batch", "--account=acct", "--time=04:00:00",
        "--exclusive", "--mem=0",
        "--wrap", "exec sleep infinity",
    ]


def test_sbatch_time_min_and_reservation():
    spec = AllocSpec("r", 0, 0, 1, 0, time_limit="04:00:00", time_min="1:00:00", reservation="maint,gpu_pool")
    argv = sbatch_argv(spec, "me", LOG)
    assert argv[argv.index("--time=04:00:00") + 1:][:2] == ["--time-min=1:00:00", "--reservation=maint,gpu_pool"]
    assert not [a for a in sbatch_argv(AllocSpec("r", 0, 0, 1, 0), "me", LOG) if a.startswith(("--time", "--res"))]


def test_sbatch_excludes_suspect_nodes_with_the_recipes_own():
    spec = AllocSpec("r", 0, 0, 1, 0, exclude=("n3", "n1"))
    assert sbatch_argv(spec, "me", LOG)[-3:] == ["--exclude=n1,n3", "--wrap", "exec sleep infinity"]
    spec = AllocSpec("r", 0, 0, 1, 0, directives=(("exclude", "n[7-8]"), ("requeue", "")), exclude=("n1", "n7"))
    argv = sbatch_argv(spec, "me", LOG)
    # one --exclude (a second would replace the first); a recipe that asks for requeue gets it (last wins)
    assert [a for a in argv if a.startswith("--exclude")] == ["--exclude=n1,n7,n8"]
    assert argv.index("--requeue") > argv.index("--no-requeue")


def test_parse_node_states():
    text = ("NodeName=rnode1 Arch=x86_64 State=IDLE ThreadsPerCore=1 Reason=(null)\n"
            "NodeName=rnode2 Arch=x86_64 State=DOWN+NOT_RESPONDING Partitions=debug "
            "Reason=Not responding [slurm@2026-12-04T15:32:30]\n"
            "NodeName=rnode3 State=MIXED+DRAIN Reason=test down now [root@2026-12-04T15:32:30]\n")
    assert parse_node_states(text) == {"rnode1": ("IDLE", ""), "rnode2": ("DOWN+NOT_RESPONDING", "Not responding"),
                                       "rnode3": ("MIXED+DRAIN", "test down now")}


def _unit(**kw) -> tuple[Unit, Launch]:
    launch = Launch(0, kw.pop("nodes", ("gpu01",)), kw.pop("ntasks", 1), kw.pop("mpi", None),
                    ("vllm", "serve", "/m", "--x", "a b"), (("A", "1"), ("B", "two words")), (0, 1))
    unit = Unit("r", "decode", 3, (0,), launch.nodes, (0, 1), {"http": 20000}, (launch,), kw.pop("container", None),
                srun_options=kw.pop("srun_options", ()), spec_hash="abc")
    return unit, launch


def test_srun_per_process_step():
    unit, launch = _unit()
    assert srun_argv("42", unit, launch, "STEP", Path("/s/log")) == [
        "srun", "--jobid=42", "--overlap", "--job-name=STEP", "--nodelist=gpu01", "--nodes=1", "--ntasks=1",
        "--output=/s/log", "--open-mode=append", "--kill-on-bad-exit=0", "--",
    ]


def test_srun_mpi_container_and_options():
    unit, launch = _unit(nodes=("gpu01", "gpu02", "gpu03"), ntasks=24, mpi="pmix", container="nvcr.io/x:1",
                         srun_options=(("cpu-bind", "none"), ("exclusive", "")))
    assert srun_argv("42", unit, launch, "STEP", Path("/s/log")) == [
        "srun", "--jobid=42", "--overlap", "--job-name=STEP", "--nodelist=gpu01,gpu02,gpu03", "--nodes=3", "--ntasks=24",
        "--output=/s/log", "--open-mode=append", "--kill-on-bad-exit=0", "--mpi=pmix",
        "--container-image=nvcr.io/x:1", "--cpu-bind=none", "--exclusive", "--",
    ]


def test_step_argv_is_the_launcher_then_env_names_then_the_command():
    """The environment's names only: its values are in the launcher's environment (step_env), which
    only its owner may read, never in argv, which every user of the node may (issue 48)."""
    _, launch = _unit()
    assert wrapped_argv(launch, Path("/s/st"), "STEP") == [
        "/bin/sh", "-c", LAUNCHER, "STEP", "/s/st", "", "", "A B", "vllm", "serve", "/m", "--x", "a b",
    ]
    assert step_env(launch) == {"RCL_ENV_A": "1", "RCL_ENV_B": "two words"}


def test_scancel():
    assert scancel_argv("42.3") == ["scancel", "42.3"]


def test_squeue_output_round_trips_through_the_parsers():
    jobs = SEP.join(["42", "rcl:me:r:a0", "RUNNING", "None", "gpu[01-02]", "2",
                     "reconciler/v1 owner=me recipe=r alloc=0 start=0 nodes=2"]) + SEP
    other = SEP.join(["43", "someone-else", "RUNNING", "None", "gpu03", "1", ""]) + SEP
    (a,) = parse_jobs(jobs + "\n" + other, "me")
    assert (a.job_id, a.recipe, a.index, a.start, a.count, a.nodes) == ("42", "r", 0, 0, 2, ("gpu01", "gpu02"))
    assert a.submitted is None  # an older squeue without SubmitTime: the recipe is rechecked at the resync
    steps = SEP.join(["42.0", "rcl:me:r:decode:3:0:abc", "gpu01"])
    (s,) = parse_steps(steps + "\n" + SEP.join(["42.1", "rcl:other:r:decode:3:0:abc", "gpu01"]), "me")
    assert (s.step_id, s.role, s.index, s.rank, s.spec_hash, s.nodes) == ("42.0", "decode", 3, 0, "abc", ("gpu01",))


def test_parse_jobs_reads_time_left_and_the_submit_time_in_local_time():
    import time

    line = SEP.join(["42", "rcl:me:r:a0", "PENDING", "Resources", "", "2",
                     "reconciler/v1 owner=me recipe=r alloc=0 start=0 nodes=2", "30:00", "2026-12-04T02:46:20"]) + SEP
    (a,) = parse_jobs(line, "me")
    assert (a.state, a.reason, a.time_left, a.nodes) == ("PENDING", "Resources", "30:00", ())
    assert a.submitted == time.mktime((2026, 12, 4, 2, 46, 20, 0, 0, -1))
    (b,) = parse_jobs(line.replace("2026-12-04T02:46:20", "N/A"), "me")
    assert b.submitted is None


def test_parse_jobs_reads_the_granted_time_limit():
    line = SEP.join(["42", "rcl:me:r:a0", "RUNNING", "None", "n1", "1",
                     "reconciler/v1 owner=me recipe=r alloc=0 start=0 nodes=1", "4:10", "N/A", "5:00"]) + SEP
    (a,) = parse_jobs(line, "me")
    assert (a.time_left, a.time_limit) == ("4:10", "5:00")


def test_slow_queries_argv_and_parsers():
    import time

    from reconciler.core.plan.reservations import Reservation
    from reconciler.drivers import slurm_queue as q

    assert q.reservations_argv() == ["scontrol", "-o", "show", "reservation"]
    assert q.squeue_start_argv("alice") == ["squeue", "--start", "-h", "-t", "PENDING", "-u", "alice", "-o",
                                            f"%i{SEP}%S{SEP}%r"]
    text = ("ReservationName=maint StartTime=2030-01-01T00:00:00 EndTime=2030-01-01T00:01:00 Duration=00:01:00 "
            "Nodes=rnode[1-2] NodeCnt=2 CoreCnt=64 Features=(null) PartitionName=(null) Flags=MAINT,IGNORE_JOBS "
            "TRES=cpu=64 Users=nobody Groups=(null) Accounts=(null) Licenses=(null) State=INACTIVE\n"
            "ReservationName=broken StartTime=Unknown EndTime=x Nodes=a\n")
    t0 = time.mktime((2030, 1, 1, 0, 0, 0, 0, 0, -1))
    assert q.parse_reservations(text) == [Reservation("maint", t0, t0 + 60, frozenset({"rnode1", "rnode2"}),
                                                      frozenset({"nobody"}), frozenset(),
                                                      frozenset({"MAINT", "IGNORE_JOBS"}))]
    assert q.parse_starts(f"12{SEP}2030-01-01T00:00:00{SEP}Resources\n13{SEP}N/A{SEP}Priority\n") == {
        "12": (t0, "Resources"), "13": (None, "Priority")}


def test_test_only_is_the_submission_asked_as_a_question_and_its_answer_read():
    import time

    from reconciler.drivers import slurm_queue as q
    from reconciler.world import AllocSpec

    argv = sbatch_argv(AllocSpec(recipe="r", index=0, start=0, count=1, gpus_per_node=2), "me", Path("/dev/null"))
    asked = q.test_only_argv(argv)
    assert asked[:2] == ["sbatch", "--test-only"] and "--parsable" not in asked
    assert asked[2:] == [a for a in argv[1:] if a != "--parsable"], "every other flag as the real submission's"
    t0 = time.mktime((2026, 12, 5, 8, 55, 41, 0, 0, -1))
    said = "sbatch: Job 4412 to start at 2026-12-05T08:55:41 using 1 processors on nodes vm in partition debug\n"
    assert q.parse_test_only(said) == t0
    assert q.parse_test_only("allocation failure: Requested node configuration is not available") is None
    assert q.parse_test_only("sbatch: Job 4 to start at Unknown using 1 processors") is None
