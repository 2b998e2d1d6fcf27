"""A GPU-less, OpenAI-compatible mock LLM engine with a continuous-batching scheduler."""
