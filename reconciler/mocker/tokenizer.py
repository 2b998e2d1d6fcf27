"""Tokens for the built-in mocker: its own deterministic vocabulary, or the model's tokenizer.

Without a tokenizer the mocker hashes words and punctuation to ids and streams filler
words. When the model directory holds ``tokenizer.json``, prompts are counted with that
tokenizer and each output token is one of its own tokens: a leading-space word that the
tokenizer maps back to exactly that one id, so a client counting the streamed text with
the model's tokenizer sees exactly ``max_tokens`` tokens.
"""

from __future__ import annotations

import re
import zlib
from pathlib import Path

VOCAB = 32000
_PIECE = re.compile(r"\w+|[^\w\s]")
FILLER = (
    "the quick model streams tokens while the scheduler batches requests and the cache keeps "
    "blocks warm so every step moves a little closer to the answer"
).split()
_WORD = re.compile(r" [a-z]{2,12}")
SCAN = 30000  # ids examined for output pieces (a 150k vocabulary need not be read whole)
WANT = 512  # output pieces collected


def encode(text: str) -> list[int]:
    return [zlib.crc32(p.encode()) % VOCAB for p in _PIECE.findall(text)]


def filler(seed: int, position: int) -> str:
    """Deterministic output text for token ``position`` of a request seeded ``seed``."""
    word = FILLER[(seed + position * 7) % len(FILLER)]
    return word if position == 0 else " " + word


class Vocabulary:
    """The mocker's own: what it uses when the model has no tokenizer."""

    source = "builtin"

    def encode(self, text: str) -> list[int]:
        return encode(text)

    def piece(self, seed: int, position: int) -> str:
        return filler(seed, position)


class ModelVocabulary(Vocabulary):
    def __init__(self, path: Path):
        from tokenizers import Tokenizer

        self.tok = Tokenizer.from_file(str(path))
        self.source = str(path)
        self.pieces: list[str] = []
        for i in range(min(self.tok.get_vocab_size(), SCAN)):
            text = self.tok.decode([i])
            if _WORD.fullmatch(text) and self.tok.encode(text, add_special_tokens=False).ids == [i]:
                self.pieces.append(text)
                if len(self.pieces) >= WANT:
                    break
        if not self.pieces:
            raise ValueError(f"{path}: no token decodes to a plain word the tokenizer maps back to itself")

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids

    def piece(self, seed: int, position: int) -> str:
        return self.pieces[(seed * 7919 + position * 31) % len(self.pieces)]


def vocabulary(model_path: str | None) -> tuple[Vocabulary, str]:
    """The vocabulary for ``model_path`` and a line saying which one (and why)."""
    if not model_path or not (Path(model_path) / "tokenizer.json").is_file():
        return Vocabulary(), "own vocabulary (no tokenizer.json at the model path)"
    try:
        v = ModelVocabulary(Path(model_path) / "tokenizer.json")
    except Exception as e:  # noqa: BLE001 - a tokenizer we cannot use: keep serving with our own
        return Vocabulary(), f"own vocabulary: cannot use {model_path}/tokenizer.json: {e}"
    return v, f"the model's tokenizer ({len(v.pieces)} output pieces)"
