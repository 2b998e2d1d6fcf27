"""JSON Schema of a recipe, for editors (yaml-language-server) and tooling."""

from __future__ import annotations

from typing import Any

from reconciler.recipe.engines import engine_names
from reconciler.recipe.model import Recipe, RestartConfig


def recipe_json_schema() -> dict[str, Any]:
    schema = Recipe.model_json_schema(by_alias=True, mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "reconciler recipe (srtctl schema 2)"
    schema["description"] = (
        "An srt-slurm recipe as the reconciler reads it. Schema 2 layout; v1 recipes "
        "(backend:, resources.<role>_workers) are accepted by the reconciler and normalised, "
        "but editors validating against this schema will flag their v1 keys."
    )
    # the string shorthands accepted by BeforeValidators are not visible to pydantic's generator
    short_engine = {"type": "string", "enum": engine_names()}
    _widen(schema["properties"], "engine", short_engine)
    defs = schema.get("$defs", {})
    if "RoleConfig" in defs:
        _widen(defs["RoleConfig"]["properties"], "engine", short_engine)
        policies = RestartConfig.model_fields["policy"].annotation.__args__  # type: ignore[union-attr]
        _widen(defs["RoleConfig"]["properties"], "restart", {"type": "string", "enum": list(policies)})
    return schema


def _widen(props: dict[str, Any], key: str, alt: dict[str, Any]) -> None:
    if key not in props:
        return
    current = props[key]
    extras = {k: current.pop(k) for k in ("default", "description", "title") if k in current}
    props[key] = {"anyOf": [alt, current], **extras}
