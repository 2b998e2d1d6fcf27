"""Engine backends: what each engine does with its knobs. Adding one: its knobs in
``recipe/engines.py``, its file here, and one line in ``registry.BACKENDS``."""

from reconciler.backends.base import Backend, HealthProbe, Runtime, SrunConfig, cli_args
from reconciler.backends.registry import BACKENDS, backend_for, backend_of, endpoints_of

__all__ = ["BACKENDS", "Backend", "HealthProbe", "Runtime", "SrunConfig", "backend_for", "backend_of", "cli_args",
           "endpoints_of"]
