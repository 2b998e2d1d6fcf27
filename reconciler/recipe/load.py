"""Read a recipe file into a validated ``Recipe``, or a located ``RecipeError``.

No exception other than ``RecipeError`` leaves ``load_recipe``: YAML errors carry
line and column, validation errors carry the key path the user wrote (v1 keys
included) and its line.
"""

from __future__ import annotations

import copy
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable
from typing import Any

import yaml
from pydantic import ValidationError

from reconciler.recipe.cluster import Cluster
from reconciler.recipe.cluster import apply as apply_cluster
from reconciler.errors import KeyedError, RecipeError
from reconciler.recipe import bounds, namespaces, v1, variants
from reconciler.recipe.entries import RECIPE_SUFFIXES, not_regular
from reconciler.recipe.gateway import bind_error
from reconciler.recipe.locate import _kind, _line, _located, _split
from reconciler.recipe.model import NAME_RE, Recipe
from reconciler.recipe.topology import TopologyError

# The rules a recipe must meet beyond its schema (``desired.admission.admit``): given the recipe,
# its data as read and whether this host's view counts (preflight), the keys carried without
# effect and why; a broken rule raises KeyedError, located here.
Admit = Callable[[Recipe, dict, bool], dict[str, str]]



@dataclass
class LoadedRecipe:
    path: str
    recipe: Recipe
    layout: str  # "v2" or "v1"
    notes: list[str] = field(default_factory=list)
    not_acted_on: dict[str, str] = field(default_factory=dict)  # key path as written -> why
    text: str = ""  # the recipe as a plain file: what last-applied keeps (a variant: its expansion)
    variant_of: str | None = None  # the sweep / override file it was expanded from


_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when available: ~10x faster


class _StrictLoader(_Base):  # type: ignore[misc, valid-type]
    """SafeLoader that rejects duplicate keys (PyYAML keeps the last one silently)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    seen: dict[Any, Any] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first at line {seen[key].line + 1})", key_node.start_mark
            )
        seen[key] = key_node.start_mark
    return yaml.constructor.SafeConstructor.construct_mapping(loader, node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_yaml(text: str, path: str) -> Any:
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        problem = e.problem or "invalid YAML"
        if e.context and e.context not in problem:
            problem = f"{e.context}: {problem}"
        raise RecipeError(
            path, f"YAML syntax error: {problem}",
            line=mark.line + 1 if mark else None, column=mark.column + 1 if mark else None,
        ) from None
    except yaml.YAMLError as e:
        raise RecipeError(path, f"YAML error: {e}") from None


def key_lines(text: str, root: yaml.Node | None = None) -> dict[tuple, int]:
    """Map each key path (tuple of keys / indices) to its 1-based line (``root``: the text
    already composed)."""
    out: dict[tuple, int] = {}
    if root is None:
        try:
            root = yaml.compose(text, Loader=_Base)
        except yaml.YAMLError:
            return out

    def walk(node: yaml.Node, prefix: tuple) -> None:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                p = prefix + (k.value,)
                out.setdefault(p, k.start_mark.line + 1)
                walk(v, p)
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                out.setdefault(prefix + (i,), v.start_mark.line + 1)
                walk(v, prefix + (i,))

    if root is not None:
        walk(root, ())
    return out


def read_recipe_text(path: str | Path) -> str:
    path = Path(path)
    try:
        if path.is_dir():
            raise RecipeError(str(path), "a directory, not a recipe file")
        why = not_regular(path)
        if why:
            raise RecipeError(str(path), f"{why}, not a recipe file")
        bounds.check_size(str(path), path.stat().st_size)
        # O_NONBLOCK: a FIFO put there after the check must not hang the reader (it is refused below)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with open(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise RecipeError(str(path), "not a regular file, not a recipe file")
            raw = f.read(bounds.max_manifest_bytes() + 1)  # the file may grow between stat and read
        bounds.check_size(str(path), len(raw))
        return raw.decode()
    except UnicodeDecodeError:
        raise RecipeError(str(path), "not a text file (expected UTF-8 YAML)") from None
    except OSError as e:
        raise RecipeError(str(path), f"cannot read: {e.strerror or e}") from None


def load_file(path: str | Path, cluster: Cluster | None = None, *, admit: Admit) -> list[LoadedRecipe]:
    """Every deployment a file declares: one, or one per sweep combination / override variant."""
    return load_all(read_recipe_text(path), str(path), cluster, admit=admit)


def load_recipe(path: str | Path, cluster: Cluster | None = None, *, admit: Admit) -> LoadedRecipe:
    """A file that declares exactly one deployment."""
    return _single(load_file(path, cluster, admit=admit), str(path))


def load_text(text: str, path: str, cluster: Cluster | None = None, preflight: bool = True, *,
              admit: Admit) -> LoadedRecipe:
    """``preflight=False``: skip the checks of this host's view (the model directory exists, the
    Dynamo version is one): a spec that already ran is not refused for them."""
    return _single(load_all(text, path, cluster, preflight, admit=admit), path)


def _single(loaded: list[LoadedRecipe], path: str) -> LoadedRecipe:
    if len(loaded) != 1:
        names = ", ".join(lr.recipe.name for lr in loaded)
        raise RecipeError(path, f"expands into {len(loaded)} deployments ({names}); expected one here")
    return loaded[0]


def load_all(text: str, path: str, cluster: Cluster | None = None, preflight: bool = True, *,
             admit: Admit) -> list[LoadedRecipe]:
    bounds.check_size(path, len(text.encode(errors="replace")))
    root = bounds.check_text(text, path)
    data = parse_yaml(text, path)
    if data is None:
        raise RecipeError(path, "empty file: expected a recipe mapping")
    if not isinstance(data, dict):
        raise RecipeError(path, f"expected a mapping of recipe keys at the top level, found {_kind(data)}", line=1)
    lines = key_lines(text, root)
    bounds.check_values(data, path, lines)
    if not variants.is_variant_file(data):
        lr = _load_data(data, path, lines, cluster, preflight, admit)
        lr.text = text
        return [lr]
    try:
        expanded = variants.expand(data, path)
    except RecipeError as e:
        parts = tuple(_split(e.key))
        e.line = e.line or next((lines[parts[:n]] for n in range(len(parts), 0, -1) if parts[:n] in lines), None)
        raise
    # a variant's keys sit under base: (or its own section) in the file: base lines locate them
    base_lines = {k[1:]: n for k, n in lines.items() if k[:1] == ("base",) and len(k) > 1} or lines
    out, problems = [], []
    for name, d in expanded:
        try:
            lr = _load_data(copy.deepcopy(d), f"{path} [{name}]", base_lines, cluster, preflight, admit)
        except RecipeError as e:
            problems += e.problems()
            continue
        lr.path, lr.variant_of = path, path
        lr.text = f"# expanded from {path}\n" + yaml.safe_dump(d, sort_keys=False)
        lr.notes.append(f"variant of {Path(path).name}")
        out.append(lr)
    if problems:
        first = problems[0]
        first.more = tuple(problems[1:])
        raise first
    return out


def _load_data(data: dict, path: str, lines: dict[tuple, int], cluster: Cluster | None, preflight: bool,
               admit: Admit) -> LoadedRecipe:
    where: dict[tuple, str] = {}
    notes: list[str] = []
    layout = "v2"
    if "roles" in data and "engine" not in data and v1.backend_is_engine(data.get("backend")):
        # some 2.0 examples still spell the engine mapping `backend:` next to roles:
        data = {("engine" if k == "backend" else k): v for k, v in data.items()}
        notes.append("backend: read as engine: (schema 2 with roles:)")
    if v1.is_v1(data):
        layout = "v1"
        try:
            data, where, notes = v1.normalize(data)
        except v1._BadBackend as e:
            raise RecipeError(path, str(e).split(": ", 1)[1], key=e.key, line=lines.get(tuple(e.key.split(".")))) from None
        except v1._Mixed as e:
            raise RecipeError(path, str(e)) from None
    rec = data.get("reconcile")
    for key in ("bash_preamble", "configs_dir"):
        if isinstance(rec, dict) and key in rec:
            # site settings: bash_preamble is shell text, which a recipe never supplies
            raise RecipeError(path, f"set by the cluster config only (srtslurm.yaml: "
                              f"{'default_bash_preamble' if key == 'bash_preamble' else 'srtctl_root'})",
                              key=f"reconcile.{key}", line=lines.get(("reconcile", key)))
    data, cluster_notes = apply_cluster(data, cluster)
    notes += cluster_notes
    _absolute_model_path(data, path, notes)
    if "name" not in data:
        stem = Path(path).stem
        if not NAME_RE.fullmatch(stem) or ".." in stem:
            raise RecipeError(path, f"no 'name' and the file name {stem!r} is not a valid recipe name", key="name")
        data["name"] = stem
        notes.append(f"name derived from the file name: {stem}")
    bounds.check_name(data["name"], path, lines)
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as e:
        raise _located(e, path, data, where, lines) from None
    if preflight:
        _check_model_path(recipe, path, cluster, lines)
        preflight_off = cluster is not None and not cluster.config.preflight
        if (not preflight_off and recipe.reconcile.gateway.allocation is None
                and (why := bind_error(recipe.reconcile.gateway.listen))):  # nginx runs here
            raise RecipeError(path, f"{why}: the gateway runs next to the reconciler; use 0.0.0.0, 127.0.0.1 "
                              "or an address of this host", key="reconcile.gateway.listen",
                              line=lines.get(("reconcile", "gateway", "listen")))
    try:
        carried = admit(recipe, data, preflight)
    except KeyedError as e:
        raise _keyed(e, path, where, lines) from None
    carried = {v1.v1_path(tuple(k.split(".")), where): why for k, why in carried.items()}
    return LoadedRecipe(path, recipe, layout, notes, carried)


def keyed_name(lr: LoadedRecipe, namespace: str) -> str:
    """The deployment's key in ``namespace`` (recipe/namespaces.py), refused at its ``name:`` when
    too long to name its directory under state/."""
    why = namespaces.key_error(namespace, lr.recipe.name)
    if why is not None:
        # a variant's name is made from its sweep values, not written on a line of the file
        line = None if lr.variant_of else key_lines(lr.text).get(("name",))
        raise RecipeError(lr.path, why, key="name", line=line)
    return namespaces.key(namespace, lr.recipe.name)


def _keyed(e: KeyedError, path: str, where: dict, lines: dict) -> RecipeError:
    """A broken rule at its key, located in the file (a topology key as the user wrote it, v1 or 2)."""
    parts = tuple(e.key.split("."))
    unsupported = e.unsupported
    if unsupported is None and e.message.startswith("unsupported feature"):
        unsupported = e.message.split(":", 1)[1].split("(")[0].strip()
    key = v1.v1_path(parts, where) if isinstance(e, TopologyError) else e.key
    return RecipeError(path, e.message, key=key, line=_line(parts, where, lines), unsupported=unsupported)


def _absolute_model_path(data: dict, path: str, notes: list[str]) -> None:
    """``~/m`` and ``./m`` are paths on this host: made absolute (the manifest's directory for a
    relative one), so that they can be mounted at /model and mean the same on every node."""
    model = data.get("model")
    p = model.get("path") if isinstance(model, dict) else None
    if not isinstance(p, str) or not p.startswith(("~", "./", "../")):
        return
    resolved = Path(p).expanduser() if p.startswith("~") else Path(path.split(" [")[0].split(" (")[0]).parent / p
    model["path"] = str(Path(os.path.normpath(resolved.absolute())))
    notes.append(f"model.path {p} is {model['path']}")


def _check_model_path(recipe: Recipe, path: str, cluster: Cluster | None, lines: dict) -> None:
    """With a cluster config (srtctl's preflight): a local model directory must exist here."""
    model = recipe.model.path
    if cluster is None or not cluster.config.preflight or recipe.serving_engine.type == "mocker":
        return
    if model.startswith("hf:") or not model.startswith(("/", "./", "../", "~")):
        return  # a Hugging Face id (or an alias the cluster config does not know): the engine resolves it
    if not Path(model).expanduser().exists():
        raise RecipeError(path, f"model directory {model!r} does not exist on this host (set preflight: false in "
                          f"{cluster.path} if it only exists on the compute nodes)", key="model.path",
                          line=lines.get(("model", "path")))


def outside_link(root: Path, f: Path) -> str | None:
    """A recipe found under ``root`` that is a symlink leading out of it: why it is refused."""
    try:
        target = f.resolve()
        if f.is_symlink() and not target.is_relative_to(root.resolve()):
            return f"{f}: a symlink leading out of {root} (to {target}); copy the file in instead"
    except OSError as e:
        return f"{f}: cannot resolve: {e}"
    return None


def name_clashes(loaded: list[tuple[str, str]]) -> dict[int, str]:
    """(path, recipe name) in scan order -> index -> the error for every deployment after the first of a name."""
    first: dict[str, str] = {}
    out: dict[int, str] = {}
    for i, (path, name) in enumerate(loaded):
        if name in first:
            out[i] = f"{path}: recipe name {name!r} is also used by {first[name]}; this one is ignored"
        else:
            first[name] = path
    return out


def iter_recipe_files(paths: list[str | Path]) -> list[Path]:
    """Files named directly, plus *.yaml/*.yml under directories, recursively (sorted, hidden
    skipped; a directory named *.yaml is a directory). Symlinked files are followed; whether one
    may lead out of a scanned directory is ``outside_link``'s call."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(
                f for f in p.rglob("*")
                if f.suffix in RECIPE_SUFFIXES and f.is_file() and not any(part.startswith(".") for part in f.relative_to(p).parts)
            )
        else:
            out.append(p)
    return out
