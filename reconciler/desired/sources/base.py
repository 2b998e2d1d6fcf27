"""The interface every unit source has: given the context and the units earlier sources made
this tick, it *offers* its units — each as a ``Life`` that the life-slot pass can build in either
slot — plus what waits, which job each runs in, their restart policies and the phase gates."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from reconciler.desired.context import Context
from reconciler.world import RestartPolicy, Unit

Key = tuple[str, int]  # (role, index)

# the frontend and the services: cheap to restart, and every request goes through them
FAST_RESTART = RestartPolicy(backoff_seconds=1.0, max_backoff_seconds=30.0)
# a frontend keeps no state: a short cap (the gateway's own restarts are capped at 8 s, shell/gateway/host.py)
STATELESS_RESTART = RestartPolicy(backoff_seconds=1.0, max_backoff_seconds=5.0)


@dataclass(frozen=True)
class Life:
    """One unit as its source can build it in either life slot (``core/slots.py``)."""

    key: Key
    build: Callable[[int], Unit | None]  # the unit in a slot (None: nothing runs, e.g. no worker to route to)
    slotted: bool = False  # it has two life slots (else slot 0, replaced in place)
    surges: bool = False  # a new life may start beside the old one (with max_surge)
    moves: bool = False  # only on a move to another allocation (a hand-over) does it start beside the old one
    shares_address: bool = False  # both lives listen on one address (the built-in router): it moves with it
    gpus: Callable[[int], tuple[int, ...]] = lambda slot: ()  # its GPUs in a slot, without building it
    exclusive_gpus: bool = False  # its two lives must not share a GPU (a GPU engine's)


@dataclass(frozen=True)
class Offer:
    lives: tuple[Life, ...] = ()
    waiting: tuple[Key, ...] = ()  # its units whose allocation or node is not running yet
    job_of: Mapping[Key, str] = field(default_factory=dict)  # unit -> the job it runs in
    restart: Mapping[str, RestartPolicy] = field(default_factory=dict)  # role -> policy
    gates: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # phase -> roles Ready before it


@dataclass(frozen=True)
class Source:
    """``kind``: where its units go in ``DesiredRecipe`` (services, workers or the frontend)."""

    name: str
    kind: Literal["services", "workers", "frontend"]
    offer: Callable[[Context, tuple[Unit, ...]], Offer]
