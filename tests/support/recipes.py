"""Recipes more than one test module deploys or loads (YAML text; ``{name}`` filled per test)."""

from __future__ import annotations

from fakes import recipe
from reconciler.desired.admission import load_text


DISAGG = """\
schema: 2
name: {name}
model: {{path: "Qwen/Qwen3-0.6B"}}
resources: {{gpus_per_node: 8}}
engine: {{type: mocker, speedup_ratio: 100}}
roles:
  prefill: {{nodes: 1, workers: 1, gpus: 1}}
  decode: {{nodes: colocate, workers: {decode}, gpus: 1, restart: {{backoff_seconds: 0.5}}}}
frontend: {{type: builtin}}
"""


KEEP = """\
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 8}}
engine: {{type: mocker, speedup_ratio: 100}}
roles: {{agg: {{workers: 1, gpus: 1}}}}
frontend: {{type: none}}
"""


FAILOVER = """\
name: fo
model: {{path: /m}}
resources: {{gpus_per_node: 8}}
frontend: {{type: {frontend}}}
engine: {{type: vllm, failover: {failover}{engine}}}
roles: {{agg: {{workers: 2, gpus: {gpus}{role}}}}}
{extra}"""


def failover_text(frontend="dynamo", failover="{}", engine="", gpus=1, role="", extra="") -> str:
    return FAILOVER.format(frontend=frontend, failover=failover, engine=engine, gpus=gpus, role=role, extra=extra)


def failover_recipe(**kw):
    return load_text(failover_text(**kw), "fo.yaml", preflight=False).recipe


ROUTED = """\
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 8}}
engine: {{type: mocker, speedup_ratio: 100}}
roles: {{agg: {{workers: 1, gpus: 1}}}}
frontend: {{type: builtin, args: {{poll-interval: 0.1}}}}
"""


BUILTIN_ONE = """\
name: r
model: {path: m}
resources: {gpus_per_node: 8}
engine: {type: mocker}
roles: {agg: {workers: 1, gpus: 1}}
frontend: {type: builtin}
"""


def builtin_one(extra: str = "", cluster=None):
    return load_text(BUILTIN_ONE + extra, "r.yaml", cluster=cluster).recipe


AGG = """\
name: r
model: {path: /m}
resources: {gpus_per_node: 8}
engine: mocker
frontend: {type: %(frontend)s}
roles:
  agg: {workers: %(workers)d, gpus: %(gpus)d}
%(extra)s
"""


def agg(workers=2, gpus=1, frontend="none", extra="", name="r"):
    text = AGG % {"workers": workers, "gpus": gpus, "frontend": frontend, "extra": extra}
    return {name: recipe(text.replace("name: r", f"name: {name}"), name)}


# the prune guard refuses to tear down when every manifest vanishes at once: a suspended
# recipe (it runs nothing) keeps the directory non-empty while a test deletes its recipe
PARKED = """\
name: parked
model: {path: m}
engine: {type: mocker}
roles: {agg: {workers: 1, gpus: 1}}
frontend: {type: none}
reconcile: {suspend: true}
"""


# one mocker worker behind the built-in router, which every recipe's gateway (nginx) fronts: the
# gateway e2e tests' recipe
GATEWAYED = """\
schema: 2
name: {name}
model: {{path: m}}
resources: {{gpus_per_node: 8}}
engine: {{type: mocker, speedup_ratio: 100}}
roles: {{agg: {{workers: 1, gpus: 1}}}}
frontend: {{type: builtin, args: {{poll-interval: 0.25}}}}
"""
