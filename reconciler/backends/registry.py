"""The engine registry: ``engine.type`` -> backend class.

Everything that needs the list of engines reads it from here: the recipe
schema's ``engine`` union, v1 normalisation (``backend.<type>_config``), the
JSON Schema, ``validate`` messages and the docs test. Adding an engine is its
file in ``reconciler/backends/`` plus one line in ``ENGINES``.
"""

from __future__ import annotations

from reconciler.backends.atom import AtomBackend
from reconciler.backends.base import Backend
from reconciler.backends.mocker import MockerBackend
from reconciler.backends.sglang import SGLangBackend
from reconciler.backends.tilert import TileRTBackend
from reconciler.backends.tokenspeed import TokenSpeedBackend
from reconciler.backends.trtllm import TRTLLMBackend
from reconciler.backends.vllm import VLLMBackend

ENGINES: dict[str, type[Backend]] = {
    "sglang": SGLangBackend,
    "vllm": VLLMBackend,
    "trtllm": TRTLLMBackend,
    "mocker": MockerBackend,
    "tokenspeed": TokenSpeedBackend,
    "atom": AtomBackend,
    "tilert": TileRTBackend,
}


def engine_names() -> list[str]:
    return list(ENGINES)


def engine_list_text(conj: str = "and") -> str:
    """'sglang, vllm, trtllm and mocker' — for messages."""
    names = engine_names()
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} {conj} {names[-1]}"


def _check() -> None:
    # the key must be the class's own `type` literal, or the discriminator would never pick it
    for name, cls in ENGINES.items():
        default = cls.__dataclass_fields__["type"].default  # type: ignore[attr-defined]
        if default != name:
            raise RuntimeError(f"ENGINES[{name!r}] is {cls.__name__}, whose type is {default!r}")


_check()
