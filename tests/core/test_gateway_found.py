"""Which running nginx master is the gateway once its state is removed (core/plan/gateway_found.py),
as an expectation table."""

import pytest

from reconciler.core.plan.gateway_found import Master, found, listen_of


def m(pid: int, *listens: tuple[str, int], started: int = 0, answers: bool = True) -> Master:
    return Master(pid, started or pid, tuple(listens), answers)


A = m(100, ("0.0.0.0", 22002))
B = m(200, ("0.0.0.0", 22004))
MUTE = m(300, ("0.0.0.0", 22002), answers=False)
TWO_PORTS = m(400, ("0.0.0.0", 22002), ("0.0.0.0", 22010))
DRAINING = m(500)  # told to quit: its listeners closed, it finishes what it carries


@pytest.mark.parametrize("recorded, masters, keep, port, end", [
    (None, [], None, None, ()),  # nothing runs: a first start takes a port
    (22002, [], None, 22002, ()),  # nothing runs: the recorded port is kept
    (None, [A], 100, 22002, ()),  # the record lost: the port is the running master's
    (22002, [A], 100, 22002, ()),  # the pid file lost: the same master
    (None, [B, A], 100, 22002, (200,)),  # two (a second one started before the fix): the older stays
    (22004, [A, B], 200, 22004, (100,)),  # the record names the endpoint: its master stays
    (22002, [B], None, 22002, (200,)),  # serving another port than the record's: ended, the record's kept
    (None, [MUTE], None, 22002, (300,)),  # not answering as this gateway: replaced on its port
    (22002, [MUTE, A], 100, 22002, (300,)),
    (None, [TWO_PORTS], None, None, (400,)),  # not a gateway's shape: no port to keep
    (22002, [DRAINING], None, 22002, ()),  # left to finish: not the gateway, not in the way
    (None, [DRAINING, A], 100, 22002, ()),
])
def test_the_running_master_is_adopted_and_its_port_kept(recorded, masters, keep, port, end):
    f = found(recorded, masters)
    assert (f.keep.pid if f.keep else None, f.port, f.end) == (keep, port, end)
    assert (f.why is None) == (not end)  # whatever is ended is said


@pytest.mark.parametrize("listens, listen", [
    ((("0.0.0.0", 1),), "0.0.0.0"),
    ((("::", 1),), "[::]"),  # ipv6only=off
    ((("127.0.0.1", 1),), "127.0.0.1"),
    ((("10.0.0.5", 1), ("127.0.0.1", 1)), "10.0.0.5"),  # bound to one address: the config adds loopback
])
def test_the_listen_address_is_read_off_its_sockets(listens, listen):
    assert listen_of(Master(1, 1, listens, True)) == listen
