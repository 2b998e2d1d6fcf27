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
    assert labels.parse_job(name, comment, "me") == labels.JobLabel("my.recipe-1", 3, 4, 2)
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
