"""Suspect-node exclusion never makes an allocation unplaceable (issue 32, item 3): an expectation
table of core/plan/nodes.placeable_exclusion. ``ReturnToService=2`` returns a downed node at once,
so every node of the lost job is suspect and back; ``=1`` keeps it down, so it alone is suspect."""

from __future__ import annotations

import pytest

from reconciler.core.plan.nodes import Suspect, placeable_exclusion
from reconciler.drivers.slurm import parse_partition_nodes

POOL = ("n1", "n2", "n3")
DOWN = lambda n, since=100.0: Suspect(n, "down", since)  # noqa: E731 - Slurm still reports it failed
BACK = lambda n, back=110.0: Suspect(n, "job ended NODE_FAIL", 100.0, back)  # noqa: E731 - in its cool-down

TABLE = [
    # (case, suspects, need, pool, recipe's own exclusions, excluded)
    ("RTS=1: the downed node alone, 2 of 3 needed", [DOWN("n1")], 2, POOL, (), ("n1",)),
    ("RTS=2: both nodes back, 2 of 3 needed: one stays out", [BACK("n1", 110), BACK("n2", 111)], 2, POOL, (), ("n2",)),
    ("failed before back", [BACK("n1", 200), DOWN("n2", 100)], 2, POOL, (), ("n2",)),
    ("two failed: the most recent failure first", [DOWN("n1", 100), DOWN("n2", 150)], 2, POOL, (), ("n2",)),
    ("room for all", [BACK("n1"), BACK("n2")], 1, POOL, (), ("n1", "n2")),
    ("no room: nothing excluded", [DOWN("n1"), BACK("n2")], 3, POOL, (), ()),
    ("the recipe's own exclusion takes the room", [DOWN("n1")], 2, POOL, ("n3",), ()),
    ("a suspect outside the partition costs nothing", [DOWN("x9"), DOWN("n1")], 2, POOL, (), ("n1", "x9")),
    ("partition unknown: all excluded (as before)", [BACK("n1"), BACK("n2")], 2, None, (), ("n1", "n2")),
]


@pytest.mark.parametrize("case, suspects, need, pool, also, expected", TABLE, ids=[t[0] for t in TABLE])
def test_exclusion_leaves_the_allocation_placeable(case, suspects, need, pool, also, expected):
    got = placeable_exclusion({s.node: s for s in suspects}, need, pool, also)
    assert got == expected
    if pool is not None:
        assert len(set(pool) - set(got) - set(also)) >= min(need, len(set(pool) - set(also)))


def test_the_partition_s_nodes_come_from_scontrol():
    text = ("PartitionName=debug AllowGroups=ALL Default=YES Nodes=rnode[1-3] State=UP\n"
            "PartitionName=big Default=NO Nodes=gpu[01-02],cpu7 State=UP\n")
    assert parse_partition_nodes(text, None) == ("rnode1", "rnode2", "rnode3")
    assert parse_partition_nodes(text, "big") == ("gpu01", "gpu02", "cpu7")
    assert parse_partition_nodes(text, "nope") is None
