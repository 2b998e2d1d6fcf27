"""Manifest files -> recipes to converge to, keeping the last good spec of a file that broke."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from reconciler.recipe import namespaces
from reconciler.recipe.cluster import Cluster
from reconciler.errors import RecipeError
from reconciler.recipe.entries import skipped_entries
from reconciler.recipe.load import LoadedRecipe, iter_recipe_files, keyed_name, outside_link
from reconciler.desired.admission import load_file, load_text
from reconciler.recipe.model import Recipe
from reconciler.drivers.state import StateDir


@dataclass
class Manifests:
    recipes: dict[str, Recipe] = field(default_factory=dict)  # what to converge to (last good spec when invalid)
    texts: dict[str, str] = field(default_factory=dict)  # name -> file text of valid recipes
    invalid: dict[str, str] = field(default_factory=dict)  # recipe name (or file stem) -> error message
    paths: dict[str, list[str]] = field(default_factory=dict)  # file path -> its recipe names (a sweep: several)
    files_seen: int = 0
    settling: dict[str, float] = field(default_factory=dict)  # file path -> when it will have been stable long enough
    skipped: dict[str, str] = field(default_factory=dict)  # *.yaml entry that is no file (FIFO, symlink loop) -> what
    # file path -> the recipe names it declares and were accepted this pass (read cleanly; not a
    # file being written, unreadable, or whose every name another file holds)
    declared: dict[str, list[str]] = field(default_factory=dict)
    renames: dict = field(default_factory=dict)  # new name -> core.plan.rename.Rename in progress (shell/renames.py)
    # file path -> why a name it declares is another file's (a file read earlier, or one held on its
    # last applied spec: invalid, being written, missing within its grace); settled once all are read
    refused: dict[str, str] = field(default_factory=dict)


DEBOUNCE = 0.5  # seconds a file must be unchanged before it is applied (an editor may still be writing it)
# seconds a file that was applied may be missing before its recipes count as deleted: editors and
# tools save by delete-then-create or rename-then-copy (``mv f f~; cp f~ f``), and the moment
# between must not tear a deployment down
DELETE_GRACE = 3.0


def load_manifests(directory: Path, state: StateDir, now: float | None = None, debounce: float = DEBOUNCE,
                   cluster: Cluster | None = None, cache: dict | None = None,
                   gone: dict[str, float] | None = None, delete_grace: float = DELETE_GRACE) -> Manifests:
    """Read every recipe file. An invalid file keeps its recipe on the last spec applied from it
    (state/<name>/last-applied.yaml); two files with one recipe name: the first wins. A file
    modified less than ``debounce`` seconds ago is not read yet: its recipe stays on its last
    applied spec (a new file waits), so a half-written file is never applied. ``cache`` (kept by
    a long-lived caller): a file whose inode, size and mtime are as when it last loaded cleanly
    is not parsed again. ``gone`` (kept by a long-lived caller): file path -> when it was first
    seen missing; an applied file missing for less than ``delete_grace`` keeps its recipes on
    their last applied spec, like a file being written."""
    m = Manifests()
    known = state.files()
    files = iter_recipe_files([directory]) if directory.is_dir() else []
    m.files_seen = len(files)
    m.skipped = skipped_entries(directory) if files or directory.is_dir() else {}
    for f in files:
        path = str(f)
        # the folder under manifests/ is the recipe's namespace: its key is folder + name
        try:
            ns = namespaces.namespace_of_file(directory, f)
        except namespaces.NamespaceError as e:
            where = str(f.relative_to(directory))  # no real key looks like this: nothing else is marked
            m.invalid[where] = f"{path}: {e}"
            m.paths[path] = [where]
            continue
        stem = namespaces.key(ns, f.stem)
        if now is not None and debounce > 0 and _held_while_written(m, state, known, f, stem, now, debounce, cluster):
            continue
        loaded = _load_or_hold(m, state, known, directory, f, ns, stem, cluster, cache)
        if loaded is not None:
            _claim(m, known, path, *loaded)
    present = {str(f) for f in files}
    if gone is not None and now is not None and delete_grace > 0:
        _hold_missing(m, state, known, present, gone, now, delete_grace, cluster)
    _settle_refused(m, state, known, cluster)
    if cache is not None:
        for path in set(cache) - present:
            del cache[path]
    return m


def _held_while_written(m: Manifests, state: StateDir, known: dict[str, list[str]], f: Path, stem: str,
                        now: float, debounce: float, cluster: Cluster | None) -> bool:
    """A file modified less than ``debounce`` seconds ago is not read: what it declared stays on
    its last applied spec (a new file's name is held invalid, never mistaken for deleted)."""
    path = str(f)
    try:
        stable_at = f.stat().st_mtime + debounce
    except OSError:
        stable_at = 0.0
    if stable_at <= now:
        return False
    m.settling[path] = stable_at
    applied = known.get(path) or _expanded_from(state, path)
    keep_last_applied(m, state, path, applied, True, cluster)
    for name in applied or ([stem] if stem in state.known_recipes() else []):
        if name not in m.recipes:
            m.invalid[name] = f"{path}: being written; its last applied spec is not usable"
    return True


def _load_or_hold(m: Manifests, state: StateDir, known: dict[str, list[str]], directory: Path, f: Path, ns: str,
                  stem: str, cluster: Cluster | None, cache: dict | None) -> tuple[list[LoadedRecipe], list[str]] | None:
    """(the file's recipes, their keys); None when it cannot be loaded: what it declared when
    last read (or, files.json lost, what its variants say) is then invalid, on its last applied spec."""
    path = str(f)
    try:
        escape = outside_link(directory, f)
        if escape:
            raise RecipeError(path, escape.split(": ", 1)[1])
        loaded: list[LoadedRecipe] = _load_cached(f, cluster, cache)
        return loaded, [keyed_name(lr, ns) for lr in loaded]  # a key too long for state/ is refused at its name
    except Exception as e:  # noqa: BLE001 - one unreadable file must not stop the others
        applied = known.get(path) or _expanded_from(state, path)
        names = applied or [stem]
        msg = str(e) if isinstance(e, RecipeError) else f"{path}: cannot load: {type(e).__name__}: {e}"
        for name in names:
            m.invalid[name] = msg
        keep_last_applied(m, state, path, applied, False, cluster)
        m.paths[path] = names
        return None


def _claim(m: Manifests, known: dict[str, list[str]], path: str, loaded: list[LoadedRecipe], keys: list[str]) -> None:
    """The file's recipes, each under its key unless an earlier file claimed it: the file it was
    applied from keeps a name, though a newcomer sorts first (a broken one keeps its claim too)."""
    for lr, name in zip(loaded, keys):
        if name in m.recipes:
            other = next(p for p, ns in m.paths.items() if name in ns)
            if name not in known.get(path, ()) or name in known.get(other, ()):
                m.invalid[name] = f"{path}: recipe name {namespaces.display(name)!r} is also used by {other}; this file is ignored"
                m.refused.setdefault(path, m.invalid[name])
                continue
            m.invalid[name] = f"{other}: recipe name {namespaces.display(name)!r} is also used by {path}; this file is ignored"
            _take_from(m, other, name, m.invalid[name])
        m.recipes[name] = _keyed(lr.recipe, name)
        m.texts[name] = lr.text
        m.paths.setdefault(path, []).append(name)
        m.declared.setdefault(path, []).append(name)


def _take_from(m: Manifests, newcomer: str, name: str, why: str) -> None:
    """``name`` is another file's (the one it was applied from): the newcomer file, which read it
    first, gives it up, in what it declares too; with none left it is refused (``_settle_refused``)."""
    for held in (m.paths, m.declared):
        if name in held.get(newcomer, ()):
            held[newcomer].remove(name)
            if not held[newcomer]:
                del held[newcomer]
    m.refused.setdefault(newcomer, why)


def _settle_refused(m: Manifests, state: StateDir, known: dict[str, list[str]], cluster: Cluster | None) -> None:
    """Once every file is read (held and missing ones too): a file left declaring nothing of its
    own (every name it declares now another file's: a rename onto a name in use) runs on what it
    was applied as, on its last applied spec, and shows why, as an invalid file does."""
    done: set[str] = set()
    while todo := [p for p in m.refused if p not in done]:  # holding one may refuse another
        for path in todo:
            done.add(path)
            if path in m.declared:
                continue
            applied = [n for n in known.get(path, ()) if n not in m.recipes]
            for name in applied:
                m.invalid.setdefault(name, m.refused[path])
            keep_last_applied(m, state, path, applied, True, cluster)


def _hold_missing(m: Manifests, state: StateDir, known: dict[str, list[str]], present: set[str],
                  gone: dict[str, float], now: float, grace: float, cluster: Cluster | None) -> None:
    """An applied file missing for less than ``grace`` seconds is held on its last applied spec,
    never taken for a deletion: a save by delete-then-create must not cancel anything."""
    for path in set(gone) - (set(known) - present):
        del gone[path]  # back (or forgotten): its next disappearance starts a new grace
    for path, names in known.items():
        if path in present or path in m.paths:
            continue
        since = gone.setdefault(path, now)
        if now - since >= grace:
            continue  # deleted for good: its recipes go
        m.settling[path] = since + grace
        keep_last_applied(m, state, path, names, True, cluster)


def _keyed(recipe: Recipe, key: str) -> Recipe:
    """The recipe under its identity: a namespaced one carries its key as its name from here on
    (labels, state/, ports, status all key on it); a top-level one is untouched."""
    return recipe if recipe.name == key else recipe.model_copy(update={"name": key})


def _load_cached(f: Path, cluster: Cluster | None, cache: dict | None) -> list[LoadedRecipe]:
    """Only clean loads are kept: a file refused for this host's state (a model directory not there
    yet) is read again each pass, and a file edited in place has a new mtime or size."""
    if cache is None:
        return load_file(f, cluster)
    st = f.stat()
    sig = (st.st_ino, st.st_size, st.st_mtime_ns, id(cluster))
    hit = cache.get(str(f))
    if hit is not None and hit[0] == sig:
        return hit[1]
    loaded = load_file(f, cluster)
    cache[str(f)] = (sig, loaded)
    return loaded


def _expanded_from(state: StateDir, path: str) -> list[str]:
    """The deployments a sweep / override file produced, from their last-applied specs (files.json lost)."""
    head = f"# expanded from {path}\n"
    return [n for n in state.known_recipes() if (state.last_applied(n) or "").startswith(head)]


def keep_last_applied(m: Manifests, state: StateDir, path: str, names: list[str], texts: bool,
                       cluster: Cluster | None) -> None:
    """The file cannot be applied now: its recipes stay on the last spec applied from it."""
    known = state.files()
    for name in names:
        last = state.last_applied(name)
        if last is None:
            continue
        if name in m.recipes:
            other = next((p for p, ns in m.paths.items() if name in ns), None)
            if other is None or other == path or name in known.get(other, ()):
                continue
            # a newcomer took the name of the recipe this file was applied as: it is not the newcomer's
            why = f"{other}: recipe name {namespaces.display(name)!r} is also used by {path}; this file is ignored"
            m.invalid.setdefault(name, why)  # an invalid file's own error, when it is one, says more
            _take_from(m, other, name, why)
        try:
            m.recipes[name] = _keyed(load_text(last, f"{path} (last applied)", cluster, preflight=False).recipe, name)
        except Exception:  # noqa: BLE001 - no usable last spec: the recipe is only Invalid (or waits)
            continue
        if name not in m.paths.setdefault(path, []):
            m.paths[path].append(name)
        if texts:
            m.texts[name] = last


def applied_since(state: StateDir, m: Manifests, seen: dict[str, tuple[str, tuple, float]],
                  now: float) -> dict[str, float]:
    """recipe -> since when its workers' counts are what they are now: the moment an edit changed
    them (``seen``, kept by a long-lived caller), or, first met, its last-applied file's time when
    that is the same text (a restarted reconciler keeps a scale-down's drain clock). An edit that
    changes no count (a comment, a flag, a tool stamping the file) does not start the clock over,
    and an invalid save leaves it as it was (the recipe runs on its last applied spec)."""
    for name, text in m.texts.items():
        if (r := m.recipes.get(name)) is None:
            continue
        counts = tuple(sorted((role, lay.workers) for role, lay in r.role_layouts().items()))
        if name in seen:
            old_text, old_counts, at = seen[name]
            seen[name] = (text, counts, at if old_counts == counts else now)
            continue
        at = now
        if state.last_applied(name) == text:
            try:
                at = state.path_of(name, "last-applied.yaml").stat().st_mtime
            except OSError:
                pass
        seen[name] = (text, counts, at)
    for gone in set(seen) - set(m.recipes):
        del seen[gone]
    return {name: at for name, (_, _, at) in seen.items()}
