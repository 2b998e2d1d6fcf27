"""Sweep files and base/override files -> the plain recipes srtctl would submit.

srtctl turns one file into several jobs in two ways (srt-slurm src/srtctl/core/sweep.py,
docs/sweeps.md and docs/overrides.md):

* a top-level ``sweep:`` maps parameter -> list of values; one job per combination (Cartesian by
  default, ``mode: zip`` pairs the i-th values); every ``"{param}"`` in the recipe is substituted and
  the job is named ``<name>_<param><value>_<param><value>...``;
* ``base:`` plus ``override_<s>:`` sections (each deep-merged over base, job ``<base name>_<s>``) and
  ``zip_override_<g>:`` sections (list leaves zipped into N jobs ``<base name>_<g>_<i>``); base alone
  is not a job. A variant that still carries ``sweep:`` is then swept.

Pure: no I/O, the input is never mutated. Where srtctl is silent or lenient (zip lists of
different lengths are truncated, a misspelt placeholder stays literal, an empty sweep yields a job
named ``<name>_``) we refuse with a located ``RecipeError`` instead, because a reconciler keeps
running what it is given and a quietly wrong deployment is worse than a refused file.
"""

from __future__ import annotations

import copy
import itertools
import math
import re
from pathlib import PurePath
from typing import Any

from reconciler.errors import RecipeError
from reconciler.recipe.bounds import MAX_VARIANTS

OVERRIDE = "override_"
ZIP_OVERRIDE = "zip_override_"
MODES = ("grid", "zip")
# A value that is exactly "{identifier}" is a placeholder. Embedded ones that name no parameter
# are left alone, as srtctl does: recipes carry runtime templates such as "donor-{node}.ready".
_WHOLE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_.-]*)\}")


def _is_override_key(k: Any) -> bool:
    return isinstance(k, str) and (k.startswith(OVERRIDE) or k.startswith(ZIP_OVERRIDE))


def is_variant_file(data: Any) -> bool:
    """True when the parsed YAML root is a sweep file or a base/override file."""
    return isinstance(data, dict) and ("sweep" in data or "base" in data or any(map(_is_override_key, data)))


def expand(data: dict, path: str) -> list[tuple[str, dict]]:
    """(deployment name, plain recipe mapping) per job srtctl would submit, in srtctl's order.

    Each mapping has a string ``name`` and no ``sweep``/``base``/``override_*`` keys. Errors carry
    ``key`` as a dotted path into the file as written (list items by index), e.g.
    ``zip_override_tp.roles.decode.nodes`` or ``sweep.conc``.
    """
    if not is_variant_file(data):
        raise ValueError(f"{path}: not a sweep or override file (check is_variant_file first)")
    data = copy.deepcopy(data)
    stem = PurePath(path).stem  # load.py names a nameless recipe after its file; so do we
    if "base" in data or any(map(_is_override_key, data)):
        variants = _override_variants(data, path, stem)
    else:
        variants = [("", data)]  # a plain sweep file
    out: list[tuple[str, dict, str]] = []  # (name, recipe, section that produced it)
    for section, recipe in variants:
        if "sweep" in recipe:
            loc = _Locator(section, data)
            out += [(n, r, loc.key(("sweep",))) for n, r in _sweep(recipe, path, loc, stem)]
        else:
            out.append((recipe["name"], recipe, section))
    if len(out) > MAX_VARIANTS:
        raise RecipeError(path, f"the file expands into {len(out)} deployments; expected at most {MAX_VARIANTS}")
    seen: dict[str, str] = {}
    for name, _recipe, where in out:
        if name in seen:
            # the reconciler keys deployments by name; srtctl would just submit two jobs
            raise RecipeError(path, f"deployment name {name!r} is produced twice (also by {seen[name]}); "
                              "expected every variant to have its own name", key=where)
        seen[name] = where
    return [(name, recipe) for name, recipe, _ in out]


class _Locator:
    """Maps a key path inside one variant back to the section of the file that wrote it."""

    def __init__(self, section: str, data: dict) -> None:
        self.section = section
        self.own = data.get(section) if section else None

    def key(self, parts: tuple) -> str:
        if not self.section:
            return _dotted(parts)
        node: Any = self.own
        for p in parts:  # written in the override section, or inherited from base:
            if isinstance(node, dict) and p in node:
                node = node[p]
            elif isinstance(node, list) and isinstance(p, int) and p < len(node):
                node = node[p]
            else:
                return _dotted(("base", *parts))
        return _dotted((self.section, *parts))


def _dotted(parts: tuple) -> str:
    return ".".join(str(p) for p in parts)


# --- sweep: ------------------------------------------------------------------------------------


def _sweep(recipe: dict, path: str, loc: _Locator, stem: str) -> list[tuple[str, dict]]:
    mode, params, where = _parameters(recipe["sweep"], path, loc)
    names = list(params)
    values = [params[n] for n in names]
    if mode == "zip":
        first = len(values[0])
        for n, v in zip(names, values):
            if len(v) != first:
                raise RecipeError(path, f"{len(v)} values, but '{names[0]}' has {first}; mode: zip pairs the "
                                  "i-th values, so every parameter needs the same number", key=loc.key((*where, n)))
        combos = list(zip(*values))
    else:
        total = math.prod(len(v) for v in values)
        if total > MAX_VARIANTS:  # refuse before materialising: 6 parameters of 20 values is 64 million
            raise RecipeError(path, f"the grid has {total} combinations; expected at most {MAX_VARIANTS} "
                              "deployments per file", key=loc.key(where))
        combos = list(itertools.product(*values))  # first parameter varies slowest, as srtctl
    template = {k: v for k, v in recipe.items() if k != "sweep"}
    # srtctl names jobs from the name as written (placeholders are not substituted into it)
    base_name = recipe.get("name")
    base_name = stem if base_name is None else str(base_name)
    out = []
    for combo in combos:
        point = dict(zip(names, combo))
        job = _substitute(template, {str(k): v for k, v in point.items()}, (), path, loc)
        job["name"] = f"{base_name}_" + "_".join(f"{k}{v}" for k, v in point.items())
        out.append((job["name"], job))
    return out


def _parameters(sweep: Any, path: str, loc: _Locator) -> tuple[str, dict, tuple]:
    """(mode, parameter -> values, key path of the parameters) from the short or explicit form."""
    if not isinstance(sweep, dict):
        raise RecipeError(path, "expected a mapping of parameter name -> list of values", key=loc.key(("sweep",)))
    mode = sweep.get("mode", "grid")
    explicit = "parameters" in sweep and set(sweep) <= {"mode", "parameters"}
    if explicit:  # sweep: {mode: zip, parameters: {a: [..]}}
        params, where = sweep["parameters"], ("sweep", "parameters")
        if not isinstance(params, dict):
            raise RecipeError(path, "expected a mapping of parameter name -> list of values", key=loc.key(where))
    elif isinstance(mode, str):  # `mode: zip` beside the parameters; a list-valued `mode` is a parameter
        params, where = {k: v for k, v in sweep.items() if k != "mode"}, ("sweep",)
    else:
        mode, params, where = "grid", sweep, ("sweep",)
    if mode not in MODES:
        raise RecipeError(path, f"expected mode 'grid' (every combination) or 'zip' (i-th values together), "
                          f"found {mode!r}", key=loc.key(("sweep", "mode")))
    if not params:
        raise RecipeError(path, "empty sweep: expected at least one parameter with a list of values",
                          key=loc.key(where))
    for name, values in params.items():
        if not isinstance(values, list) or not values:
            found = "an empty list" if values == [] else f"{type(values).__name__} {values!r}"
            raise RecipeError(path, f"expected a non-empty list of values, found {found}",
                              key=loc.key((*where, name)))
    return mode, params, where


def _substitute(node: Any, values: dict[str, Any], parts: tuple, path: str, loc: _Locator) -> Any:
    """srtctl's expand_template: an exact "{p}" takes the value with its type, "{p}" inside a longer
    string is text (a list joined with ","); keys are never substituted."""
    if isinstance(node, dict):
        return {k: _substitute(v, values, (*parts, k), path, loc) for k, v in node.items()}
    if isinstance(node, list):
        return [_substitute(v, values, (*parts, i), path, loc) for i, v in enumerate(node)]
    if not isinstance(node, str):
        return node
    whole = _WHOLE.fullmatch(node)
    if whole and whole.group(1) not in values:
        # srtctl would leave the literal "{typo}" in the job; it is a misspelt parameter
        raise RecipeError(path, f"placeholder '{node}' names no sweep parameter; expected one of: "
                          + ", ".join(values), key=loc.key(parts))
    result = node
    for key, value in values.items():  # in parameter order, as srtctl
        placeholder = "{" + key + "}"
        if result == placeholder:
            return copy.deepcopy(value)
        if placeholder in result:
            text = ",".join(str(v) for v in value) if isinstance(value, list) else str(value)
            result = result.replace(placeholder, text)
    return result


# --- base: + override_* / zip_override_* -------------------------------------------------------------


def _override_variants(data: dict, path: str, stem: str) -> list[tuple[str, dict]]:
    """(section key, merged recipe) per variant: override_* sorted, then zip_override_* sorted."""
    if "base" not in data:
        first = next(k for k in data if _is_override_key(k))
        raise RecipeError(path, "an override section needs a base: section to merge into", key=first)
    base = data["base"]
    if not isinstance(base, dict):
        raise RecipeError(path, "expected a mapping: the recipe every variant starts from", key="base")
    for k in data:
        if k == "sweep":
            raise RecipeError(path, "sweep: beside base: is not read by srtctl; expected it inside base: "
                              "or inside an override_<name> section", key="sweep")
        if k not in ("schema", "base") and not _is_override_key(k):
            raise RecipeError(path, "unknown top-level key in an override file; expected schema, base, "
                              "override_<name> or zip_override_<name>", key=str(k))
        if k in (OVERRIDE, ZIP_OVERRIDE):
            raise RecipeError(path, f"expected a variant name after '{k}'", key=k)
    overrides = sorted(k for k in data if k.startswith(OVERRIDE))
    zips = sorted(k for k in data if k.startswith(ZIP_OVERRIDE))
    if not overrides and not zips:
        raise RecipeError(path, "expected at least one override_<name> or zip_override_<name> section "
                          "(srtctl submits only those; base: alone is not a deployment)", key="base")
    base_name = stem if base.get("name") is None else str(base["name"])
    out: list[tuple[str, dict]] = []
    for key in overrides:
        section = _section(data, key, path)
        merged = _merge(base, section)
        if "name" not in section:
            merged["name"] = f"{base_name}_{key[len(OVERRIDE):]}"
        out.append((key, merged))
    for key in zips:
        out += [(key, merged) for merged in _zip_variants(key, _section(data, key, path), base, base_name, path)]
    for key, merged in out:
        if "schema" in data:  # declared beside base:, each variant is a standalone recipe
            merged.setdefault("schema", data["schema"])
        if not isinstance(merged.get("name"), str):
            raise RecipeError(path, f"expected a string name for this variant, found {merged.get('name')!r}",
                              key=f"{key}.name")
    return out


def _section(data: dict, key: str, path: str) -> dict:
    section = data[key]
    if not isinstance(section, dict):
        found = "nothing" if section is None else type(section).__name__
        raise RecipeError(path, f"expected a mapping of keys to merge over base:, found {found}", key=key)
    return section


def _merge(base: dict, override: dict) -> dict:
    """srtctl's deep_merge: dicts merge, lists and scalars replace, null deletes the key."""
    result = copy.deepcopy(base)
    for k, v in override.items():
        if v is None:
            result.pop(k, None)
        elif isinstance(v, dict) and isinstance(result.get(k), dict):
            result[k] = _merge(result[k], v)
        else:
            result[k] = copy.deepcopy(v)
    return result


def _list_leaves(node: dict, parts: tuple) -> list[tuple[tuple, list]]:
    """Every list-valued leaf, through nested mappings only (a list is itself the leaf)."""
    out: list[tuple[tuple, list]] = []
    for k, v in node.items():
        if isinstance(v, list):
            out.append(((*parts, k), v))
        elif isinstance(v, dict):
            out += _list_leaves(v, (*parts, k))
    return out


def _zip_variants(key: str, section: dict, base: dict, base_name: str, path: str) -> list[dict]:
    leaves = _list_leaves(section, (key,))
    if not leaves:
        raise RecipeError(path, "nothing to zip: expected list values, one element per variant "
                          "(use override_<name> for a single variant)", key=key)
    for parts, values in leaves:
        if not values:
            raise RecipeError(path, "empty list: expected one value per variant, or one value for all",
                              key=_dotted(parts))
    sized = [(parts, len(v)) for parts, v in leaves if len(v) != 1]  # length 1 broadcasts
    n = sized[0][1] if sized else 1
    for parts, length in sized:
        if length != n:
            raise RecipeError(path, f"{length} values, but {_dotted(sized[0][0])} has {n}; expected {n} "
                              "values (one per variant) or exactly 1 (used by every variant)", key=_dotted(parts))
    named = isinstance(section.get("name"), list)  # a scalar name would repeat, so srtctl auto-names
    out = []
    for i in range(n):
        merged = _merge(base, _slice(section, i))
        if not named:
            merged["name"] = f"{base_name}_{key[len(ZIP_OVERRIDE):]}_{i}"
        out.append(merged)
    return out


def _slice(node: dict, i: int) -> dict:
    """The i-th variant of a zip section: a list gives its i-th element (a list of lists gives a
    literal list), a length-1 list its only element, a scalar itself."""
    out: dict = {}
    for k, v in node.items():
        if isinstance(v, list):
            out[k] = v[0 if len(v) == 1 else i]
        elif isinstance(v, dict):
            out[k] = _slice(v, i)
        else:
            out[k] = v
    return out
