"""A deterministic, dependency-free tokenizer: words and punctuation, hashed to ids."""

from __future__ import annotations

import re
import zlib

VOCAB = 32000
_PIECE = re.compile(r"\w+|[^\w\s]")
FILLER = (
    "the quick model streams tokens while the scheduler batches requests and the cache keeps "
    "blocks warm so every step moves a little closer to the answer"
).split()


def encode(text: str) -> list[int]:
    return [zlib.crc32(p.encode()) % VOCAB for p in _PIECE.findall(text)]


def filler(seed: int, position: int) -> str:
    """Deterministic output text for token ``position`` of a request seeded ``seed``."""
    word = FILLER[(seed + position * 7) % len(FILLER)]
    return word if position == 0 else " " + word
