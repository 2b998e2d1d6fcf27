"""A small JSON Schema checker for the subset `reconciler schema` prints (pydantic v2's draft
2020-12 output: $ref into $defs, anyOf, oneOf, type, const, enum, properties, required,
additionalProperties, items, minimum, maximum, exclusiveMinimum, pattern). Enough to validate
recipes against the printed schema in tests without a dependency; a keyword it does not know
fails loudly instead of passing silently."""

from __future__ import annotations

import re
from typing import Any

KNOWN = {"$ref", "anyOf", "type", "const", "enum", "properties", "required", "additionalProperties", "items",
         "minimum", "maximum", "exclusiveMinimum", "pattern", "title", "default", "description", "$defs",
         "$schema", "examples", "format", "oneOf", "discriminator"}  # discriminator: OpenAPI's, no constraint
TYPES: dict[str, tuple[type, ...]] = {"object": (dict,), "array": (list,), "string": (str,), "boolean": (bool,),
                                      "null": (type(None),), "integer": (int,), "number": (int, float)}


def problems(value: Any, schema: dict, root: dict | None = None, at: str = "$") -> list[str]:
    """Where ``value`` breaks ``schema`` (empty: it conforms)."""
    root = root if root is not None else schema
    unknown = set(schema) - KNOWN
    if unknown:
        raise ValueError(f"{at}: schema keywords this checker does not know: {sorted(unknown)}")
    if "$ref" in schema:
        return problems(value, root["$defs"][schema["$ref"].rsplit("/", 1)[1]], root, at)
    if "oneOf" in schema:
        fits = [s for s in schema["oneOf"] if not problems(value, s, root, at)]
        if len(fits) != 1:
            return [f"{at}: {len(fits)} of oneOf fit, want exactly 1"]
        return []
    if "anyOf" in schema:
        tries = [problems(value, s, root, at) for s in schema["anyOf"]]
        return [] if any(not t for t in tries) else [f"{at}: none of anyOf fits ({min(tries, key=len)[0]})"]
    t = schema.get("type")
    if t and (not isinstance(value, TYPES[t]) or (isinstance(value, bool) and t in ("integer", "number"))):
        return [f"{at}: {value!r} is not of type {t}"]
    out = []
    if "const" in schema and value != schema["const"]:
        out.append(f"{at}: {value!r} is not {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        out.append(f"{at}: {value!r} is not one of {schema['enum']}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            out.append(f"{at}: {value} is below the minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            out.append(f"{at}: {value} is above the maximum {schema['maximum']}")
        if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
            out.append(f"{at}: {value} is not above {schema['exclusiveMinimum']}")
    if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
        out.append(f"{at}: {value!r} does not match {schema['pattern']}")
    if isinstance(value, list) and "items" in schema:
        for i, v in enumerate(value):
            out += problems(v, schema["items"], root, f"{at}[{i}]")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        out += [f"{at}: missing {k}" for k in schema.get("required", []) if k not in value]
        extra = schema.get("additionalProperties", True)
        for k, v in value.items():
            if k in props:
                out += problems(v, props[k], root, f"{at}.{k}")
            elif extra is False:
                out.append(f"{at}: unknown key {k!r}")
            elif isinstance(extra, dict):
                out += problems(v, extra, root, f"{at}.{k}")
    return out
