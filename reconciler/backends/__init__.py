"""Engine backends. Adding one: its file plus one line in ``registry.ENGINES``."""

from reconciler.backends.base import Backend, HealthProbe, Runtime, SrunConfig, cli_args
from reconciler.backends.mocker import MockerBackend
from reconciler.backends.sglang import SGLangBackend
from reconciler.backends.trtllm import TRTLLMBackend
from reconciler.backends.vllm import VLLMBackend
from reconciler.recipe.failover import FailoverConfig
from reconciler.backends.registry import ENGINES, engine_list_text, engine_names

__all__ = [
    "ENGINES",
    "engine_list_text",
    "engine_names",
    "Backend",
    "HealthProbe",
    "MockerBackend",
    "Runtime",
    "SGLangBackend",
    "SrunConfig",
    "TRTLLMBackend",
    "VLLMBackend",
    "FailoverConfig",
    "cli_args",
]
