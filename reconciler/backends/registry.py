"""The backend registry: ``engine.type`` -> the class that gives its knobs behaviour.

Everything that needs an engine's behaviour asks here with the recipe: ``backend_for``
(a role's engine, bound to its recipe), ``backend_of`` (the serving role's, as srtctl's
``config.backend``) and ``endpoints_of`` (the recipe's workers over node ordinals, each
engine checking its own roles). The desired-state build binds once: ``engines`` binds each
engine the recipe names one time, with the build's one ``Allocation``, and the build carries
the result. The names and knob schemas are ``recipe/engines.py``;
adding an engine is its knobs there, its file in ``reconciler/backends/`` and one line in
``BACKENDS``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from reconciler.backends.atom import AtomBackend
from reconciler.backends.base import Backend
from reconciler.backends.mocker import MockerBackend
from reconciler.backends.sglang import SGLangBackend
from reconciler.backends.tilert import TileRTBackend
from reconciler.backends.tokenspeed import TokenSpeedBackend
from reconciler.backends.trtllm import TRTLLMBackend
from reconciler.backends.vllm import VLLMBackend
from reconciler.recipe.engines import ENGINES, Engine
from reconciler.recipe.model import Recipe
from reconciler.recipe.topology import Allocation, Endpoint

BACKENDS: dict[str, type[Backend]] = {
    "sglang": SGLangBackend,
    "vllm": VLLMBackend,
    "trtllm": TRTLLMBackend,
    "mocker": MockerBackend,
    "tokenspeed": TokenSpeedBackend,
    "atom": AtomBackend,
    "tilert": TileRTBackend,
}


def bind(engine: Engine, recipe: Recipe, allocation: Allocation | None = None) -> Backend:
    """The backend of ``engine`` (a recipe's validated knobs), bound to ``recipe``."""
    cls = BACKENDS[engine.type]
    b = object.__new__(cls)
    b.__dict__.update(engine.__dict__)  # the knobs as validated: not validated again
    return b.bind(recipe, allocation)


@dataclass(frozen=True)
class Engines:
    """A recipe's backends, each bound once, with the one allocation they share: what a build
    carries instead of binding again wherever an engine's behaviour is asked for."""

    serving: Backend  # the recipe's engine (``backend_of``)
    roles: Mapping[str, Backend]  # role -> its engine (``backend_for``); the same object when they share one
    allocation: Allocation
    mixed: bool  # per-role engines of different types

    def of(self, mode: str) -> Backend:
        return self.roles.get(mode, self.serving)

    def endpoints(self) -> list[Endpoint]:
        """``endpoints_of``: each engine checks its own roles; the layout is the shared one."""
        if not self.mixed:
            return self.serving.allocate_endpoints()
        out = None
        for mode in self.roles:
            eps = self.roles[mode].allocate_endpoints()
            out = eps if out is None else out
        return out or []


def engines(recipe: Recipe, allocation: Allocation | None = None) -> Engines:
    """Every engine ``recipe`` names, bound once to it (roles that share an engine share its
    backend). ``allocation``: the layouts its workers are placed by (default: the recipe's own)."""
    alloc = allocation or Allocation(recipe)
    bound: dict[int, Backend] = {}

    def one(engine: Engine) -> Backend:
        if id(engine) not in bound:
            bound[id(engine)] = bind(engine, recipe, alloc)
        return bound[id(engine)]

    serving = one(recipe.serving_engine)
    return Engines(serving, {m: one(recipe.engine_for(m)) for m, _ in recipe.roles.items()}, alloc,
                   recipe.mixed_engines)


def backend_for(recipe: Recipe, mode: str) -> Backend:
    """The engine that runs ``mode``: its own ``roles.<mode>.engine``, else the recipe's."""
    return bind(recipe.engine_for(mode), recipe)


def backend_of(recipe: Recipe) -> Backend:
    """The recipe's engine; with per-role engines, the serving role's (decode, else agg, else
    prefill), as srtctl's ``config.backend``."""
    return bind(recipe.serving_engine, recipe)


def endpoints_of(recipe: Recipe) -> list[Endpoint]:
    """Logical workers over node ordinals. Per-role engines of different types: each engine
    checks the recipe its way (each checks only its own roles), the layout is the generic one."""
    return engines(recipe).endpoints()


def _check() -> None:
    # every engine a recipe may name has a backend of its kind, and nothing else does
    if list(BACKENDS) != list(ENGINES):
        raise RuntimeError(f"backends {list(BACKENDS)} differ from the engines {list(ENGINES)} (recipe/engines.py)")
    for name, cls in BACKENDS.items():
        if not issubclass(cls, ENGINES[name]):
            raise RuntimeError(f"BACKENDS[{name!r}] is {cls.__name__}, which does not extend {ENGINES[name].__name__}")


_check()
