"""Engine backends. Adding one: its file, its export here, and ``EngineConfig`` in
``reconciler.recipe.model``."""

from reconciler.backends.base import Backend, HealthProbe, Runtime, SrunConfig, cli_args
from reconciler.backends.mocker import MockerBackend
from reconciler.backends.sglang import SGLangBackend
from reconciler.backends.trtllm import TRTLLMBackend
from reconciler.backends.vllm import VLLMBackend, VLLMFailoverConfig

__all__ = [
    "Backend",
    "HealthProbe",
    "MockerBackend",
    "Runtime",
    "SGLangBackend",
    "SrunConfig",
    "TRTLLMBackend",
    "VLLMBackend",
    "VLLMFailoverConfig",
    "cli_args",
]
