"""Slurm hostlist expressions and ownership labels."""

from __future__ import annotations

import pytest

from reconciler import hostlist, labels


@pytest.mark.parametrize(
    "expr, hosts",
    [
        ("gpu[01-04,07]", ["gpu01", "gpu02", "gpu03", "gpu04", "gpu07"]),
        ("node1", ["node1"]),
        ("a,b[3-4],c", ["a", "b3", "b4", "c"]),
        ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
        ("n[8-11]", ["n8", "n9", "n10", "n11"]),
        ("n[098-101]", ["n098", "n099", "n100", "n101"]),
        ("", []),
        ("(null)", []),
    ],
)
def test_expand(expr, hosts):
    assert hostlist.expand(expr) == hosts


@pytest.mark.parametrize("bad", ["n[1-", "n]1[", "n[a-b]", "n[5-1]"])
def test_expand_rejects_garbage(bad):
    with pytest.raises(ValueError):
        hostlist.expand(bad)


def test_job_labels_roundtrip_and_need_both_markers():
    name, comment = labels.job_name("me", "my.recipe-1", 3), labels.job_comment("me", "my.recipe-1", 3, 4, 2)
    assert labels.parse_job(name, comment, "me") == labels.JobLabel("my.recipe-1", 3, 4, 2)  # labelled before gpus=
    with_gpus = labels.job_comment("me", "my.recipe-1", 3, 4, 2, gpus=6)
    assert labels.parse_job(name, with_gpus, "me") == labels.JobLabel("my.recipe-1", 3, 4, 2, gpus=6)
    assert labels.parse_job(name, "someone else's comment", "me") is None
    assert labels.parse_job("train", comment, "me") is None
    assert labels.parse_job(labels.job_name("me", "other", 3), comment, "me") is None  # name and comment disagree
    assert labels.parse_job(name, comment, "you") is None  # another reconciler's job


def test_step_labels_roundtrip():
    n = labels.step_name("me", "r.v2", "decode", 12, 1, "abcdef0123")
    assert labels.parse_step(n, "me") == labels.StepLabel("r.v2", "decode", 12, 1, "abcdef0123")
    assert labels.parse_step(n, "you") is None
    assert labels.parse_step("batch", "me") is None
    assert labels.parse_step("rcl:me:r:agg:x:0:abc", "me") is None


def test_owner_defaults_to_the_state_directory_and_names_are_checked(tmp_path):
    import pytest

    assert labels.default_owner(tmp_path / "a") == labels.default_owner(tmp_path / "a")
    assert labels.default_owner(tmp_path / "a") != labels.default_owner(tmp_path / "b")
    assert labels.check_owner("prod-1") == "prod-1"
    with pytest.raises(ValueError):
        labels.check_owner("Prod:1")


LONG = "gb300-fp4-dsr1-8k1k-ctx2-gen1-tep8-batch64-eplb0-mtp3-trtllm-disagg-" + "x" * 60


def test_long_recipe_names_are_abbreviated_stably_in_labels_and_kept_whole_in_the_comment():
    tag = labels.recipe_tag(LONG)
    assert tag == labels.recipe_tag(LONG) and len(tag) == labels.TAG_MAX and "~" in tag
    assert labels.recipe_tag(LONG + "y") != tag  # same prefix, different recipe: different tag
    assert labels.recipe_tag("short") == "short"
    name, comment = labels.job_name("me", LONG, 0), labels.job_comment("me", LONG, 0, 0, 1)
    assert len(name) < 128 and LONG not in name and f"recipe={LONG} " in comment
    assert labels.parse_job(name, comment, "me") == labels.JobLabel(LONG, 0, 0, 1)
    # a comment naming another recipe with the same abbreviation prefix is not ours
    assert labels.parse_job(name, labels.job_comment("me", LONG + "y", 0, 0, 1), "me") is None
    # jobs and steps labelled before the abbreviation (whole names up to 63) are still recognised
    mid = "m" * 60
    assert labels.parse_job(f"rcl:me:{mid}:a0", labels.job_comment("me", mid, 0, 0, 1), "me").recipe == mid
    assert labels.parse_step(f"rcl:me:{mid}:agg:0:0:ab", "me", labels.tags({mid})).recipe == mid
    step = labels.step_name("me", LONG, "decode", 1, 0, "abc")
    assert len(step) < 128
    assert labels.parse_step(step, "me", labels.tags({LONG, "short"})).recipe == LONG
    assert labels.parse_step(step, "me").recipe == tag  # no allocation map given: the tag stands in
    assert labels.parse_step(step, "me", {}) is None  # its allocation not in this read: left alone, not pruned


def test_slurm_parse_resolves_long_names_through_the_allocation():
    from reconciler.drivers.slurm import SEP, parse_jobs, parse_steps

    jobs = SEP.join(["7", labels.job_name("me", LONG, 0), "RUNNING", "None", "vm", "1",
                     labels.job_comment("me", LONG, 0, 0, 1)])
    allocs = parse_jobs(jobs, "me")
    assert [a.recipe for a in allocs] == [LONG]
    steps = parse_steps(SEP.join(["7.0", labels.step_name("me", LONG, "agg", 0, 0, "ab12"), "vm"]), "me",
                        labels.tags({a.recipe for a in allocs}))
    assert [s.recipe for s in steps] == [LONG]


def test_slurm_parse_reads_time_left_and_tolerates_its_absence():
    from reconciler.drivers.slurm import SEP, parse_jobs

    base = ["7", labels.job_name("me", "r", 0), "RUNNING", "None", "vm", "1", labels.job_comment("me", "r", 0, 0, 1)]
    (a,) = parse_jobs(SEP.join([*base, "29:58"]) + SEP, "me")
    assert a.time_left == "29:58"
    (b,) = parse_jobs(SEP.join(base), "me")  # an older squeue without the field
    assert b.time_left == ""


def test_scontrol_tells_how_a_job_ended():
    from reconciler.drivers.slurm import parse_job_end

    line = ("JobId=7 JobName=rcl:me:r:a0 UserId=root(0) JobState=NODE_FAIL Reason=NodeDown Dependency=(null) "
            "Requeue=1 NodeList=vm")
    assert parse_job_end(line) == ("NODE_FAIL", "NodeDown")
    assert parse_job_end("slurm_load_jobs error: Invalid job id specified") is None
