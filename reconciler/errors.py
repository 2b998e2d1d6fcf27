"""Errors users see. Every one carries enough context to be printed as one line."""

from __future__ import annotations

from dataclasses import dataclass


class ReconcilerError(Exception):
    """Base for errors that are reported to the user without a traceback."""


@dataclass
class RecipeError(ReconcilerError):
    """A recipe file was rejected.

    ``key`` is a dotted key path (``roles.decode.workers``) or empty for file-level
    problems; ``line``/``column`` are 1-based when known. ``unsupported`` names a
    feature the reconciler deliberately does not support (as opposed to a mistake).
    """

    path: str
    message: str
    key: str = ""
    line: int | None = None
    column: int | None = None
    unsupported: str | None = None

    def __str__(self) -> str:
        where = self.path
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        if self.key:
            where += f": {self.key}"
        return f"{where}: {self.message}"
