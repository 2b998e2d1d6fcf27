"""Errors users see. Every one carries enough context to be printed as one line
(a recipe with several problems prints one line per problem)."""

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
    more: tuple[RecipeError, ...] = ()  # the file's other problems, each located

    def __str__(self) -> str:
        if not self.more:
            return self.one_line()
        lines = [f"{self.one_line()} (1 of {len(self.more) + 1} problems)"]
        lines += [f"  also {p.one_line()}" for p in self.more]
        return "\n".join(lines)

    def problems(self) -> list[RecipeError]:
        return [self, *self.more]

    def one_line(self) -> str:
        where = self.path
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        if self.key:
            where += f": {self.key}"
        return f"{where}: {self.message}"


class KeyedError(ValueError):
    """A rule beyond the schema broken at one key path of a recipe (``roles.decode.workers``).
    The layers above the recipe raise it (topology, services, frontends, engines); the loader
    turns it into a located ``RecipeError``. ``unsupported`` names a feature deliberately not
    supported (as opposed to a mistake)."""

    def __init__(self, key: str, message: str, unsupported: str | None = None):
        super().__init__(message)
        self.key, self.message, self.unsupported = key, message, unsupported


class ServiceError(KeyedError):
    """A service (``services:`` or one a section implies) that cannot run as written."""

    def __str__(self) -> str:
        return f"{self.key}: {self.message}"
