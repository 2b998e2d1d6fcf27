"""Validation errors located in the file as the user wrote it: the key path (v1 spelling
included), its line, and for an unknown key what was meant or what is allowed there."""

from __future__ import annotations

import difflib
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from reconciler.recipe.engines import ENGINES
from reconciler.errors import RecipeError
from reconciler.recipe import v1
from reconciler.recipe.model import Recipe

TYPE_NAMES = {"int", "str", "float", "bool", "none", "list", "dict", "tuple", "literal", "is-instance"}


def _kind(v: Any) -> str:
    return {list: "a list", str: "a string", int: "a number", float: "a number", bool: "a boolean"}.get(
        type(v), type(v).__name__
    )


def _line(parts: tuple, where: dict, lines: dict) -> int | None:
    orig = v1.v1_path(parts, where)
    for candidate in (tuple(_split(orig)), parts):
        for n in range(len(candidate), 0, -1):
            if candidate[:n] in lines:
                return lines[candidate[:n]]
    return None


def _split(dotted: str) -> list:
    return [int(p) if p.isdigit() else p for p in dotted.split(".")] if dotted else []


def _clean_loc(loc: tuple) -> tuple:
    out: list = []
    for item in loc:
        if isinstance(item, str) and ("[" in item or "(" in item or item in TYPE_NAMES):
            continue
        if isinstance(item, str) and item.endswith("Backend"):
            continue  # a union arm's class name
        if out and out[-1] == "engine" and item in ENGINES:
            continue  # the discriminator tag pydantic puts in the path
        out.append(item)
    return tuple(out)


def _located(e: ValidationError, path: str, data: dict, where: dict, lines: dict) -> RecipeError:
    """Every problem of the file, one per key path; the first leads, the rest ride along."""
    seen: set[tuple] = set()
    problems: list[RecipeError] = []
    for err in e.errors():
        parts = _clean_loc(err["loc"])
        if parts in seen:
            continue  # a union reports one error per arm; the first real one is the most telling
        seen.add(parts)
        problems.append(_problem(err, parts, path, data, where, lines))
    first = problems[0]
    first.more = tuple(problems[1:])
    return first


def _problem(err: Any, parts: tuple, path: str, data: dict, where: dict, lines: dict) -> RecipeError:
    key = v1.v1_path(tuple(str(p) for p in parts), where) if parts else ""
    etype = err["type"]
    found = err.get("input")
    if etype in ("extra_forbidden", "unexpected_keyword_argument"):
        unknown = str(parts[-1]) if parts else "?"
        allowed = _allowed_keys(parts[:-1], data)
        msg = f"unknown key '{unknown}'"
        close = difflib.get_close_matches(unknown, allowed, n=1)
        if close:
            msg += f" (did you mean '{close[0]}'?)"
        elif allowed:
            msg += f"; expected one of: {', '.join(allowed)}"
    elif etype == "missing":
        msg = "required key is missing"
    else:
        text = err["msg"].removeprefix("Value error, ")
        msg = text if "found" in text or text.startswith("unsupported feature") else f"{text}; found {_show(found)}"
    unsupported = msg.split(":", 1)[1].split("(")[0].strip() if msg.startswith("unsupported feature") else None
    return RecipeError(
        path, msg, key=key, line=_line(tuple(str(p) for p in parts), where, lines), unsupported=unsupported
    )


def _show(v: Any) -> str:
    if isinstance(v, (dict, list)):
        return _kind(v)
    s = repr(v)
    return s if len(s) < 60 else s[:57] + "..."


def _allowed_keys(parts: tuple, data: dict) -> list[str]:
    """Keys accepted at ``parts`` of the model, for 'did you mean' help."""
    tp: Any = Recipe
    node: Any = data
    for p in parts:
        node = node.get(p) if isinstance(node, dict) else None
        tp = _child_type(tp, p, node)
        if tp is None:
            return []
    return sorted(_fields(_pick(tp, node)))


def _fields(tp: Any) -> list[str]:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [f.alias or n for n, f in tp.model_fields.items()]
    fields = getattr(tp, "__pydantic_fields__", None)
    return list(fields) if fields else []


def _pick(tp: Any, node: Any) -> Any:
    """Resolve Optional/Union/Annotated to the model the data is meant for."""
    args = [a for a in _arms(tp) if _fields(a)]
    if len(args) > 1 and isinstance(node, dict):
        for a in args:
            t = getattr(a, "__pydantic_fields__", {}).get("type")
            if t is not None and node.get("type") == t.default:
                return a
    return args[0] if args else tp


def _arms(tp: Any) -> list[Any]:
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _arms(typing.get_args(tp)[0])
    if origin in (typing.Union, __import__("types").UnionType):
        return [x for a in typing.get_args(tp) for x in _arms(a)]
    return [tp]


def _child_type(tp: Any, key: Any, node: Any) -> Any:
    model = _pick(tp, node)
    if _fields(model):
        if isinstance(model, type) and issubclass(model, BaseModel):
            for n, f in model.model_fields.items():
                if key in (n, f.alias):
                    return f.annotation
            return None
        f = model.__pydantic_fields__.get(key)
        return f.annotation if f else None
    for arm in _arms(tp):
        origin = typing.get_origin(arm)
        if origin in (dict, list):
            return typing.get_args(arm)[-1]
    return None
