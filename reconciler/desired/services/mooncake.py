"""The Mooncake KV store: one ``mooncake-master`` service, its address stamped on every worker.

srtctl's rules (docs/mooncake-kv-store.md upstream), on our allocator's ports instead of
the fixed 8700/8701/8702:

- the master is a ``services:`` entry of type ``mooncake-master`` or, the same thing
  spelled the other way, ``engine.mooncake_kv_store``; both at once is refused;
- every worker gets ``MOONCAKE_MASTER`` (host:rpc), ``MOONCAKE_TE_META_DATA_SERVER``
  (the master's HTTP metadata server) and ``MOONCAKE_LOCAL_HOSTNAME`` (its own node,
  unless the recipe pins it), plus ``mooncake_kv_store.env``; the first two are ours
  alone, and setting them by hand is an error rather than a silent override;
- vLLM reads ``store_config`` from the JSON file ``MOONCAKE_CONFIG_PATH`` names;
  TRT-LLM's ``mooncake-store`` connector reads one JSON file per role;
- SGLang disaggregated workers must select ``disaggregation-transfer-backend: mooncake``,
  or they would silently use another transport beside a master nobody uses.
Pure: raises ``ServiceError`` with the key path of the first problem.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler.backends.base import get_key
from reconciler.recipe.model import Recipe
from reconciler.errors import ServiceError

KIND = "mooncake-master"
OWNED_ENV = ("MOONCAKE_MASTER", "MOONCAKE_TE_META_DATA_SERVER", "MOONCAKE_CONFIG_PATH")
# options of an older srtctl's TRT-LLM pool (trtllm-serve mooncake_master, donors); current srtctl refuses them too
OWNED_FLAGS = ("port", "rpc_port", "http_metadata_server_port", "metrics_port", "enable_http_metadata_server")
LEGACY_OPTIONS = ("eviction_ratio", "master_timeout_s", "store_role")
# TRT-LLM store config: srtctl's per-role default, and the keys its connector no longer reads
TRTLLM_ROLE_DEFAULT = {"prefill": "both", "agg": "both", "decode": "capacity"}
TRTLLM_REFUSED = ("segment_size", "pool", "run_dir", "master_timeout")


@dataclass(frozen=True)
class Store:
    """The normalised store, whichever way the recipe spelled it."""

    at: str  # where it is declared, for errors
    env: Mapping[str, str] = field(default_factory=dict)
    store_config: Mapping[str, Any] | None = None
    extra_args: tuple[str, ...] = ()
    container: str | None = None
    lease_ms: int = 10000


def store_of(recipe: Recipe) -> Store | None:
    declared = [(i, s) for i, s in enumerate(recipe.services) if s.type == KIND and s.enabled]
    kv = recipe.serving_engine.mooncake_kv_store
    if len(declared) > 1:
        raise ServiceError(f"services.{declared[1][0]}", "only one mooncake-master service per recipe")
    if declared and kv is not None:
        raise ServiceError("engine.mooncake_kv_store", f"the Mooncake master is declared twice (also services."
                                                       f"{declared[0][0]}): keep one of the two spellings")
    if kv is not None:
        if kv.device_names_by_gpu is not None:
            raise ServiceError("engine.mooncake_kv_store.device_names_by_gpu",
                               "unsupported feature: per-GPU Mooncake store config files")
        return Store("engine.mooncake_kv_store", dict(kv.env), kv.store_config, tuple(kv.master_extra_args),
                     kv.container, kv.default_kv_lease_ttl_ms)
    if not declared:
        return None
    i, s = declared[0]
    at = f"services.{i}"
    legacy = sorted(set(s.options) & set(LEGACY_OPTIONS))
    if legacy:
        raise ServiceError(f"{at}.options.{legacy[0]}", "unsupported feature: the TRT-LLM Mooncake pool options of "
                           f"an older srtctl ({', '.join(LEGACY_OPTIONS)}); a mooncake-master takes store_config")
    if "device_names_by_gpu" in s.options:
        raise ServiceError(f"{at}.options.device_names_by_gpu", "unsupported feature: per-GPU Mooncake store "
                                                                 "config files")
    sc = s.options.get("store_config")
    if sc is not None and not isinstance(sc, dict):
        raise ServiceError(f"{at}.options.store_config", f"expected a mapping, found {type(sc).__name__}")
    if s.external is not None:
        raise ServiceError(f"{at}.external", "unsupported feature: an external Mooncake master (its metadata "
                                             "server's address is not part of the entry)")
    return Store(at, {}, sc, tuple(map(str, s.args)), s.container)


def check(recipe: Recipe, store: Store) -> None:
    """The recipe-wide rules, once a master exists."""
    for a in store.extra_args:
        flag = a.lstrip("-").split("=", 1)[0]
        if a.startswith("-") and flag in OWNED_FLAGS:
            where = "master_extra_args" if store.at.startswith("engine") else "args"
            raise ServiceError(f"{store.at}.{where}", f"{a!r}: the reconciler sets the master's ports and metadata "
                               "server (the workers are told those); remove it")
    hand = [("environment", recipe.environment), (f"{store.at}.env", store.env)]
    hand += [(f"roles.{m}.env", r.env) for m, r in recipe.roles.items()]
    for at, env in hand:
        for var in OWNED_ENV:
            if var in env:
                raise ServiceError(f"{at}.{var}", "set by the reconciler from the mooncake-master service it runs "
                                                  "(its own ports); remove it")
    engine = recipe.serving_engine.type
    if engine == "sglang" and recipe.disaggregated:
        uses = [m for m in ("prefill", "decode")
                if str(get_key(recipe.roles[m].args, "disaggregation-transfer-backend")).lower() == "mooncake"]
        if not uses:
            raise ServiceError("roles.prefill.args", "a mooncake-master is configured but neither roles.prefill.args "
                               "nor roles.decode.args has 'disaggregation-transfer-backend: mooncake': add it to "
                               "both roles, or the workers use another transport and the master sits idle")
    if engine == "vllm" and recipe.disaggregated:
        uses = [m for m in ("prefill", "decode")
                if "mooncakestoreconnector" in str(get_key(recipe.roles[m].args, "kv-transfer-config") or "").lower()]
        if not uses:
            raise ServiceError("roles.prefill.args", "a mooncake-master is configured but neither roles.prefill.args "
                               "nor roles.decode.args has a kv-transfer-config that names a Mooncake connector "
                               "(MooncakeStoreConnector, alone or inside a MultiConnector)")
    if engine == "trtllm":
        for m, r in recipe.roles.items():
            cfg = r.mooncake_store_config or {}
            at = f"roles.{m}.mooncake_store_config"
            for k in sorted(set(cfg) & set(TRTLLM_REFUSED)):
                raise ServiceError(f"{at}.{k}", "not read by TRT-LLM's mooncake-store connector (srtctl refuses it too)")
            for k, v in cfg.items():
                if isinstance(v, str) and re.fullmatch(r"\s*\d+(\.\d+)?\s*[GMK]B\s*", v, re.I):
                    raise ServiceError(f"{at}.{k}", f"write binary units (GiB, MiB), found {v!r}")
            if "stage_through_host" in cfg and not isinstance(cfg["stage_through_host"], bool):
                raise ServiceError(f"{at}.stage_through_host", "expected true or false")


@dataclass(frozen=True)
class Wiring:
    """What the workers of a recipe with a master get: env and, per role, a config file."""

    store_env: Mapping[str, str]  # mooncake_kv_store.env
    owned: Mapping[str, str]  # MOONCAKE_MASTER, MOONCAKE_TE_META_DATA_SERVER: ours alone
    files: Mapping[str, Mapping[str, str]]  # mode -> {path: text}

    def stamp(self, mode: str, node: str, env: dict[str, str]) -> dict[str, str]:
        """The store's env under ``env`` (the worker's: recipe, role and what the reconciler computes),
        then the master's address on top; a hand-set MOONCAKE_LOCAL_HOSTNAME pins the NIC."""
        out = {"MOONCAKE_LOCAL_HOSTNAME": node, **self.store_env, **env, **self.owned}
        for path in self.files.get(mode, {}):
            out["MOONCAKE_CONFIG_PATH"] = path
        return out


def wiring(recipe: Recipe, store: Store, head: str, ports: Mapping[str, int], config_dir: str,
           served_model_name: str) -> Wiring:
    master = f"{head}:{ports['rpc']}"
    owned = {"MOONCAKE_MASTER": master, "MOONCAKE_TE_META_DATA_SERVER": f"http://{head}:{ports['metadata']}/metadata"}
    files: dict[str, dict[str, str]] = {}
    engine = recipe.serving_engine.type
    if engine == "vllm":
        doc = {**(store.store_config or {}), "master_server_address": master}
        text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
        files = {m: {f"{config_dir}/mooncake_store_config.json": text} for m, _ in recipe.roles.items()}
    elif engine == "trtllm":
        for m, r in recipe.roles.items():
            conn = get_key(r.args, "kv_connector_config")
            if not (isinstance(conn, dict) and conn.get("connector") == "mooncake-store"):
                continue  # srtctl: only the roles whose connector reads it get a file
            doc = {"role": TRTLLM_ROLE_DEFAULT[m], "model_key": served_model_name, **(store.store_config or {}),
                   **(r.mooncake_store_config or {}), "master_server_address": master}
            files[m] = {f"{config_dir}/mooncake_store_config_{m}.json": json.dumps(doc, indent=2, sort_keys=True) + "\n"}
    return Wiring(dict(store.env), owned, files)
