"""The v1 recipe layout, normalised into schema 2.

v1 spreads a role over three places: ``resources.<role>_nodes/_workers``,
``backend.<role>_environment`` and ``backend.<engine>_config.<role>``. This
module moves them under ``roles.<role>`` and keeps a map from each new key path
back to the key the user wrote, so errors name the user's key.
"""

from __future__ import annotations

import copy
from typing import Any

from reconciler.recipe.engines import ENGINES

V1_ROLE = {"prefill": "prefill", "decode": "decode", "agg": "aggregated"}
RESOURCE_KEYS = {"nodes": "{r}_nodes", "workers": "{r}_workers", "gpus": "gpus_per_{r}", "critical": "{r}_critical"}
ENGINE_CONFIG_KEYS = {f"{name}_config": name for name in ENGINES}  # backend.sglang_config, ...
# resources.spread_workers is schema 2 as well: only the per-role spellings mark a v1 recipe
V1_RESOURCE_KEYS = frozenset(p.format(r=r) for r in V1_ROLE for p in RESOURCE_KEYS.values())
# v1 keys srtctl 2.0 moved; (section, v1 key) -> how the schema-2 value is derived
MOVED = {
    ("frontend", "orchestrator_placement"): ("placement", lambda v: {"node": v}),
    ("frontend", "dedicated_node"): ("placement", lambda v: {"node": "dedicated"} if v else {}),
    ("benchmark", "client_placement"): ("placement", lambda v: {"node": v}),
    ("benchmark", "client_dedicated_node"): ("placement", lambda v: {"node": "dedicated"} if v else {}),
    ("dynamo", "cargo_patches"): ("source", lambda v: {"patches": v}),
}

Path = tuple[str, ...]


def backend_is_engine(backend: Any) -> bool:
    """A ``backend:`` mapping with only engine knobs (no per-role v1 keys)."""
    if not isinstance(backend, dict):
        return False
    v1_keys = set(ENGINE_CONFIG_KEYS) | {"kv_events_config"}
    return not any(k in v1_keys or k.endswith(("_environment", "_extra_args")) for k in backend)


def is_v1(data: dict[str, Any]) -> bool:
    res = data.get("resources")
    if "backend" in data:
        return True
    if isinstance(res, dict):
        return any(k in V1_RESOURCE_KEYS for k in res)
    return False


Where = dict[Path, str]


def normalize(data: dict[str, Any]) -> tuple[dict[str, Any], dict[Path, str], list[str]]:
    """Return (schema-2 data, new-path -> v1 key path, notes)."""
    d = copy.deepcopy(data)
    where: Where = {}
    notes: list[str] = ["v1 layout normalised into schema 2"]
    if "roles" in d or "engine" in d:
        raise _Mixed()
    res = d.get("resources")
    res = res if isinstance(res, dict) else {}
    backend = d.pop("backend", None)
    if backend is not None and not isinstance(backend, dict):
        raise _BadBackend(backend)
    backend = backend or {}
    roles = _roles(res, where)
    engine_type = _role_configs(backend, roles, where, notes)
    _role_env_and_args(backend, roles, where, notes)
    _kv_events(backend, roles, where)
    engine: dict[str, Any] = {"type": engine_type or "sglang"}
    engine.update(backend)  # the remaining backend keys are engine knobs
    d["engine"] = engine
    where[("engine",)] = "backend"
    d["roles"] = roles
    d["resources"] = res
    _moved(d, where, notes)
    fe = d.get("frontend")
    if isinstance(fe, dict) and fe.get("type") == "sglang":
        # v1 spelled the SGLang router "sglang"; schema 2 calls it sglang-router
        fe["type"] = "sglang-router"
        notes.append("frontend.type 'sglang' (v1) read as 'sglang-router'")
    return d, where, notes


def _roles(res: dict[str, Any], where: Where) -> dict[str, dict[str, Any]]:
    """The roles v1's resources size (their keys taken out of ``res``)."""
    roles: dict[str, dict[str, Any]] = {}
    for role in ("prefill", "decode", "agg"):
        for field, pattern in RESOURCE_KEYS.items():
            key = pattern.format(r=role)
            if key in res:
                roles.setdefault(role, {})[field] = res.pop(key)
                where[("roles", role, field)] = f"resources.{key}"
    # a v1 role exists when resources sized it; configs for absent roles are ignored as srtctl does
    for role in list(roles):
        if not any(f in roles[role] for f in ("nodes", "workers")):
            del roles[role]
    for role, r in roles.items():
        if role == "decode" and r.get("nodes") == 0:
            r["nodes"] = "colocate"
    return roles


def _role_configs(backend: dict[str, Any], roles: dict[str, dict[str, Any]], where: Where,
                  notes: list[str]) -> str | None:
    """Each role's engine args from backend.<engine>_config (taken out of ``backend``); the engine
    type, from backend.type or the config's name."""
    engine_type = backend.pop("type", None)
    for cfg_key, etype in ENGINE_CONFIG_KEYS.items():
        cfg = backend.pop(cfg_key, None)
        if cfg is None:
            continue
        engine_type = engine_type or etype
        if not isinstance(cfg, dict):
            raise _BadBackend(cfg, f"backend.{cfg_key}")
        for role, v1name in V1_ROLE.items():
            if v1name in cfg:
                if role in roles:
                    roles[role]["args"] = cfg.pop(v1name)
                    where[("roles", role, "args")] = f"backend.{cfg_key}.{v1name}"
                else:
                    cfg.pop(v1name)
                    notes.append(f"backend.{cfg_key}.{v1name} ignored: the recipe has no {role} role")
        for k in cfg:
            notes.append(f"backend.{cfg_key}.{k} ignored (not a role)")
    return engine_type


def _role_env_and_args(backend: dict[str, Any], roles: dict[str, dict[str, Any]], where: Where,
                       notes: list[str]) -> None:
    """backend.<role>_environment and <role>_extra_args onto their roles."""
    for role, v1name in V1_ROLE.items():
        for suffix, field in (("_environment", "env"), ("_extra_args", "extra_args")):
            key = v1name + suffix
            if key in backend:
                val = backend.pop(key)
                if role in roles:
                    roles[role][field] = val
                    where[("roles", role, field)] = f"backend.{key}"
                else:
                    notes.append(f"backend.{key} ignored: the recipe has no {role} role")


def _kv_events(backend: dict[str, Any], roles: dict[str, dict[str, Any]], where: Where) -> None:
    """backend.kv_events_config onto the roles that publish."""
    kv = backend.pop("kv_events_config", None)
    if kv is True:  # srtctl: a global true publishes from prefill and decode, with the defaults
        kv = {"prefill": True, "decode": True}
    if isinstance(kv, dict):
        for role, v1name in V1_ROLE.items():
            for name in (v1name, role):
                if name in kv and role in roles:
                    roles[role]["kv_events"] = kv[name]
                    where[("roles", role, "kv_events")] = f"backend.kv_events_config.{name}"


def _moved(d: dict[str, Any], where: Where, notes: list[str]) -> None:
    """Keys v1 kept under another name in the same section."""
    for (section, key), (new, derive) in MOVED.items():
        sec = d.get(section)
        if isinstance(sec, dict) and key in sec:
            value = derive(sec.pop(key))
            if isinstance(sec.get(new), dict):
                sec[new] = {**value, **sec[new]}
            elif value:
                sec[new] = value
            where[(section, new)] = f"{section}.{key}"
            notes.append(f"{section}.{key} (v1) read as {section}.{new}")


class _Mixed(ValueError):
    def __init__(self) -> None:
        super().__init__(
            "mixes the v1 layout (backend: / resources.<role>_workers) with schema 2 (roles: / engine:); use one"
        )


class _BadBackend(ValueError):
    def __init__(self, value: Any, key: str = "backend") -> None:
        super().__init__(f"{key}: expected a mapping, found {type(value).__name__}")
        self.key = key


def v1_path(path: Path, where: dict[Path, str]) -> str:
    """Translate a schema-2 key path back to what the user wrote."""
    for n in range(len(path), 0, -1):
        if path[:n] in where:
            rest = ".".join(path[n:])
            return where[path[:n]] + ("." + rest if rest else "")
    return ".".join(path)
