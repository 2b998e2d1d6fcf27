"""Ports that never collide on a node, across every recipe the reconciler manages.

A port is owned by ``(owner, name)`` on a node — owner is ``<recipe>/<role>_<index>``
(or ``<recipe>/frontend``). Asking again for the same owner and name on the same
node returns the same port, so a relaunched worker keeps its ports. ``release``
frees everything an owner (or a whole recipe) held. The registry is persisted
under state/ so two recipes sharing a node stay apart across restarts.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from reconciler.fsutil import atomic_write_text

DEFAULT_BASE = 20000
DEFAULT_LIMIT = 32000  # below the usual Linux ephemeral range (32768+)


class PortsExhausted(RuntimeError):
    pass


class NodePortAllocator:
    def __init__(self, base: int = DEFAULT_BASE, limit: int = DEFAULT_LIMIT):
        if not 0 < base < limit <= 65536:
            raise ValueError(f"bad port range {base}..{limit}")
        self.base = base
        self.limit = limit
        # node -> {port: "owner#name"}
        self._by_node: dict[str, dict[int, str]] = {}
        # node -> {"owner#name": port}
        self._by_key: dict[str, dict[str, int]] = {}
        # recipe -> {(node, "owner#name"): port}: the same entries by recipe, so that one recipe's
        # ports are found without a scan of every recipe's (a build asks per recipe: quadratic)
        self._by_recipe: dict[str, dict[tuple[str, str], int]] = {}
        self._cursor: dict[str, int] = {}
        # node -> {port: until}: ports something else turned out to hold; skipped until then
        self._blocked: dict[str, dict[int, float]] = {}
        self.now = 0.0  # the tick's time: blocks that ended before it are over (set by the caller)

    def copy(self, now: float | None = None) -> NodePortAllocator:
        """An independent copy (a tick's assignment), at ``now``."""
        other = copy.copy(self)  # the maps are copied a level down: plain str/int/float inside
        other._by_node = {n: dict(m) for n, m in self._by_node.items()}
        other._by_key = {n: dict(m) for n, m in self._by_key.items()}
        other._by_recipe = {r: dict(m) for r, m in self._by_recipe.items()}
        other._cursor = dict(self._cursor)
        other._blocked = {n: dict(m) for n, m in self._blocked.items()}
        if now is not None:
            other.now = now
        return other

    def owned_by_recipe(self, recipe: str) -> tuple[tuple[str, str, int], ...]:
        """(node, owner#name, port) of every port a recipe's units hold: part of its build cache key."""
        return tuple(sorted((node, key, port) for (node, key), port in self._by_recipe.get(recipe, {}).items()))

    def owned_index(self) -> dict[str, tuple[tuple[str, str, int], ...]]:
        """``owned_by_recipe`` for every recipe at once (one pass, not one per recipe)."""
        return {r: self.owned_by_recipe(r) for r, held in self._by_recipe.items() if held}

    def set_range(self, base: int, limit: int) -> None:
        """New ports come from [base, limit); ports already handed out stay where they are."""
        if not 0 < base < limit <= 65536:
            raise ValueError(f"bad port range {base}..{limit}")
        self.base, self.limit = base, limit
        self._cursor = {n: c for n, c in self._cursor.items() if base <= c < limit}

    # ---------------------------------------------------------------- queries
    def allocate(self, node: str, owner: str, name: str) -> int:
        key = f"{owner}#{name}"
        keys = self._by_key.setdefault(node, {})
        if key in keys:
            return keys[key]
        ports = self._by_node.setdefault(node, {})
        blocked = {p for p, until in self._blocked.get(node, {}).items() if until > self.now}
        span = self.limit - self.base
        start = self._cursor.get(node, self.base)
        for i in range(span):
            port = self.base + (start - self.base + i) % span
            if port not in ports and port not in blocked:
                self._put(node, key, port)
                self._cursor[node] = port + 1 if port + 1 < self.limit else self.base
                return port
        raise PortsExhausted(f"no free port left on {node} in --port-range {self.base}-{self.limit} (HI excluded)")

    def allocate_block(self, node: str, owner: str, name: str, size: int) -> int:
        """``size`` consecutive ports (an engine that opens base + rank); returns the base.

        The extra ports are owned as ``name+1`` .. ``name+<size-1>``, so they persist, are
        released with the owner and are never handed to anyone else."""
        if size <= 1:
            return self.allocate(node, owner, name)
        keys = self._by_key.setdefault(node, {})
        names = [name] + [f"{name}+{i}" for i in range(1, size)]
        held = [keys.get(f"{owner}#{n}") for n in names]
        if all(p is not None for p in held) and held == list(range(held[0], held[0] + size)):  # type: ignore[operator]
            return held[0]  # type: ignore[return-value]
        ports = self._by_node.setdefault(node, {})
        blocked = {p for p, until in self._blocked.get(node, {}).items() if until > self.now}
        base0 = held[0]
        if base0 is not None and all(p is None or p == base0 + i for i, p in enumerate(held)) and all(
                ports.get(base0 + i, f"{owner}#{n}") == f"{owner}#{n}" and base0 + i not in blocked
                for i, n in enumerate(names)):
            # the base survived (a registry relearnt from status keeps only it): the rest is still free
            for i, n in enumerate(names):
                self._put(node, f"{owner}#{n}", base0 + i)
            return base0
        for n, p in zip(names, held):  # a block of another size, or broken up: start afresh
            if p is not None:
                self._drop(node, f"{owner}#{n}")
        start = self._cursor.get(node, self.base)
        for base in [*range(start, self.limit - size + 1), *range(self.base, min(start, self.limit - size + 1))]:
            if all(p not in ports and p not in blocked for p in range(base, base + size)):
                for i, n in enumerate(names):
                    self._put(node, f"{owner}#{n}", base + i)
                self._cursor[node] = base + size if base + size < self.limit else self.base
                return base
        raise PortsExhausted(f"no {size} consecutive free ports left on {node} in --port-range {self.base}-{self.limit} (HI excluded)")

    def claim(self, node: str, owner: str, name: str, port: int) -> bool:
        """Record a port already in use by ``owner``; False when someone else holds it."""
        key = f"{owner}#{name}"
        ports = self._by_node.setdefault(node, {})
        if ports.get(port, key) != key:
            return False
        self._put(node, key, port)
        return True

    def block(self, node: str, port: int, until: float) -> None:
        """A process we do not own holds ``port`` on ``node``: hand it to nobody until ``until``."""
        self._blocked.setdefault(node, {})[port] = until

    def held_by(self, owner: str) -> dict[str, dict[str, int]]:
        """node -> {name: port} of one owner."""
        out: dict[str, dict[str, int]] = {}
        for node, keys in self._by_key.items():
            for key, port in keys.items():
                k_owner, name = key.split("#", 1)
                if k_owner == owner:
                    out.setdefault(node, {})[name] = port
        return out

    def lookup(self, node: str, owner: str, name: str) -> int | None:
        return self._by_key.get(node, {}).get(f"{owner}#{name}")

    def owners(self, recipe: str | None = None) -> set[str]:
        """Every owner holding a port; with ``recipe``, that recipe's only (no scan of the others)."""
        if recipe is not None:
            return {k.split("#", 1)[0] for _, k in self._by_recipe.get(recipe, {})}
        return {k.split("#", 1)[0] for keys in self._by_key.values() for k in keys}

    def release(self, owner: str) -> int:
        """Free every port of ``owner``; an owner ending in '/' frees a whole recipe."""
        freed = 0
        for node, keys in self._by_key.items():
            for key in [k for k in keys if _owned(k, owner)]:
                self._drop(node, key)
                freed += 1
        return freed

    def release_taken_since(self, recipe: str, before: tuple[tuple[str, str, int], ...]) -> int:
        """Free the ports a recipe's units took since ``before`` (its ``owned_by_recipe`` then): a
        build that failed half-way must not keep what it took, or the next recipe finds none."""
        keep = set(before)
        freed = 0
        for node, key, port in self.owned_by_recipe(recipe):
            if (node, key, port) not in keep:
                self._drop(node, key)
                freed += 1
        return freed

    def release_node_owner(self, node: str, owner: str) -> None:
        keys = self._by_key.get(node, {})
        for key in [k for k in keys if _owned(k, owner)]:
            self._drop(node, key)

    def release_key(self, node: str, owner: str, name: str) -> None:
        """Free one named port of ``owner`` on ``node`` (its other ports stay)."""
        if f"{owner}#{name}" in self._by_key.get(node, {}):
            self._drop(node, f"{owner}#{name}")

    def _put(self, node: str, key: str, port: int) -> None:
        """Hand ``port`` on ``node`` to ``key`` (owner#name), in every index."""
        self._by_node.setdefault(node, {})[port] = key
        self._by_key.setdefault(node, {})[key] = port
        self._by_recipe.setdefault(_recipe_of(key), {})[(node, key)] = port

    def _drop(self, node: str, key: str) -> None:
        """Free what ``key`` holds on ``node``, in every index."""
        port = self._by_key[node].pop(key)
        self._by_node[node].pop(port, None)
        held = self._by_recipe.get(_recipe_of(key), {})
        held.pop((node, key), None)

    def used_on(self, node: str) -> dict[int, str]:
        return dict(self._by_node.get(node, {}))

    # ---------------------------------------------------------------- persistence
    def to_dict(self) -> dict:
        return {
            "base": self.base,
            "limit": self.limit,
            "nodes": {n: dict(sorted(k.items())) for n, k in sorted(self._by_key.items()) if k},
            "blocked": {n: {str(p): u for p, u in sorted(b.items()) if u > self.now}
                        for n, b in sorted(self._blocked.items()) if b},
        }

    @classmethod
    def from_dict(cls, data: dict) -> NodePortAllocator:
        alloc = cls(int(data.get("base", DEFAULT_BASE)), int(data.get("limit", DEFAULT_LIMIT)))
        for node, keys in (data.get("nodes") or {}).items():
            for key, port in keys.items():
                alloc._put(node, key, int(port))
        for node, ports in (data.get("blocked") or {}).items():
            alloc._blocked[node] = {int(p): float(u) for p, u in ports.items()}
        return alloc

    @classmethod
    def load(cls, path: Path) -> NodePortAllocator:
        try:
            return cls.from_dict(json.loads(path.read_text()))
        except FileNotFoundError:
            return cls()
        except (ValueError, AttributeError, TypeError):
            # a corrupt registry is rebuilt: ports of running workers are re-learnt
            # from their step's spec on the next tick
            return cls()

    def dumps(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n"

    def save(self, path: Path) -> None:
        atomic_write_text(path, self.dumps())


def _recipe_of(key: str) -> str:
    """The recipe of an ``owner#name`` key: owners are ``<recipe>/<unit>`` (a recipe key holds no '/')."""
    return key.split("/", 1)[0]


def _owned(key: str, owner: str) -> bool:
    k_owner = key.split("#", 1)[0]
    return k_owner.startswith(owner) if owner.endswith("/") else k_owner == owner
