"""srtctl's ``benchmark:`` section, mapped to aiperf runs (pure).

srtctl runs each benchmark type through its own script in the container (sa-bench's
benchmark_serving.py, lm-eval, sglang's eval scripts...). Here a throughput/latency type is
measured by aiperf, installed offline in its own venv (scripts/stacks-install.sh), with
srtctl's parameters carried over: sa-bench runs ``num_prompts_mult x concurrency`` prompts
at each concurrency after ``num_warmup_mult x concurrency`` warm-up prompts, ``--ignore-eos``,
against ``/v1/completions`` with ``req_rate`` (``inf`` by default). Types whose tool or data
set does not install offline are refused when the recipe asks for its benchmark to run
(``reconcile.benchmark``), with why; without that key the section stays carried, as before.
``TYPES`` is the table docs/recipes.md shows.
"""

from __future__ import annotations

from dataclasses import dataclass

from reconciler.errors import KeyedError
from reconciler.recipe.carried import BenchmarkConfig

MAX_CONCURRENCY = 4096
MAX_LEVELS = 32  # concurrencies in one run
MAX_LENGTH = 1 << 20  # isl / osl, tokens
MAX_PROMPTS_MULT = 1000
MAX_WARMUP_MULT = 100

_THROUGHPUT = "aiperf: isl, osl, concurrencies, req_rate (random synthetic prompts, fixed lengths)"
_ACCURACY = ("an accuracy evaluation: its tool and data set ({what}) do not install offline here, and "
             "aiperf measures load, not answers; run it by hand against the gateway")
# type -> ("aiperf" | "refused" | "nothing", how or why)
TYPES: dict[str, tuple[str, str]] = {
    "sa-bench": ("aiperf", _THROUGHPUT),
    "sglang-bench": ("aiperf", _THROUGHPUT + "; sglang's bench_serving is not run"),
    "aiperf-bench": ("aiperf", _THROUGHPUT),
    "manual": ("nothing", "srtctl's manual type drives no load: nothing runs"),
    "none": ("nothing", "no benchmark: nothing runs"),
    "mmlu": ("refused", _ACCURACY.format(what="sglang's run_eval, the MMLU set")),
    "gpqa": ("refused", _ACCURACY.format(what="sglang's run_eval, the GPQA set")),
    "gsm8k": ("refused", _ACCURACY.format(what="the GSM8K set")),
    "gsm8k-bench": ("refused", _ACCURACY.format(what="the GSM8K set")),
    "longbenchv2": ("refused", _ACCURACY.format(what="LongBench v2")),
    "lm-eval": ("refused", _ACCURACY.format(what="lm-evaluation-harness and its tasks")),
    "aime": ("refused", _ACCURACY.format(what="the AIME set")),
    "aime25": ("refused", _ACCURACY.format(what="the AIME 2025 set")),
    "mlperf": ("refused", "MLPerf's loadgen and its data sets do not install offline here"),
    "router": ("refused", "srtctl's router benchmark replays prefix-sharing workloads from its own scripts; "
                          "not mapped to aiperf yet"),
    "mooncake-router": ("refused", "replays a Mooncake trace (downloaded by name); not mapped to aiperf yet"),
    "trace-replay": ("refused", "trace replay (fixed schedule from trace_file) is not mapped to aiperf yet"),
    "prefix-replay": ("refused", "not mapped to aiperf yet"),
    "agentic": ("refused", "agentic workloads need srtctl's vendored aiperf fork and its traces"),
    "agentx": ("refused", "agentic workloads need srtctl's vendored aiperf fork and its traces"),
    "custom": ("refused", "a custom command reports no metrics the reconciler can check (validity, analysis); "
                          "run it as a service of the recipe instead"),
}


@dataclass(frozen=True)
class Level:
    """One concurrency of a run: one aiperf invocation."""

    concurrency: int
    requests: int
    warmup: int


@dataclass(frozen=True)
class BenchPlan:
    """What the runner (reconciler/benchrun) does: aiperf once per level, the same shape each time."""

    type: str
    isl: int
    osl: int
    req_rate: str  # "inf" or a positive number of requests per second
    levels: tuple[Level, ...]

    def aiperf_args(self, level: Level, model: str, tokenizer: str) -> list[str]:
        """aiperf profile's arguments for one level, without --url and --artifact-dir (the runner's)."""
        args = ["--model", model, "--tokenizer", tokenizer, "--endpoint-type", "completions", "--streaming",
                "--isl", str(self.isl), "--osl", str(self.osl), "--extra-inputs", "ignore_eos:true",
                "--concurrency", str(level.concurrency), "--request-count", str(level.requests), "--ui-type", "none"]
        if level.warmup:
            args += ["--warmup-request-count", str(level.warmup)]
        if self.req_rate != "inf":
            args += ["--request-rate", self.req_rate]
        return args


def handling(kind: str) -> tuple[str, str]:
    return TYPES.get(kind, ("refused", f"unknown benchmark type {kind!r} (known: {', '.join(sorted(TYPES))})"))


def bench_plan(b: BenchmarkConfig) -> BenchPlan | None:
    """The runs the section asks for, or None (a type that runs nothing); KeyedError when refused."""
    how, why = handling(b.type)
    if how == "nothing":
        return None
    if how == "refused":
        raise KeyedError("benchmark.type", f"benchmark type {b.type!r} cannot run here: {why}")
    for key in ("isl", "osl", "concurrencies"):
        if getattr(b, key) is None:
            raise KeyedError(f"benchmark.{key}", f"benchmark.{key} is required for {b.type}")
    isl, osl = _length("isl", b.isl), _length("osl", b.osl)  # type: ignore[arg-type]
    if b.dataset_name not in (None, "random") or b.dataset_path:
        raise KeyedError("benchmark.dataset_name", "only the random (synthetic) data set runs here: a named or "
                                                   "file data set is not mapped to aiperf yet")
    if b.custom_tokenizer:
        raise KeyedError("benchmark.custom_tokenizer", "a custom tokenizer class is sa-bench's Python; aiperf "
                                                       "counts tokens with the model's own tokenizer")
    mult = _bounded("num_prompts_mult", b.num_prompts_mult, 10, 1, MAX_PROMPTS_MULT)
    warm = _bounded("num_warmup_mult", b.num_warmup_mult, 2, 0, MAX_WARMUP_MULT)
    levels = tuple(Level(c, c * mult, c * warm) for c in concurrencies(b.concurrencies))
    return BenchPlan(b.type, isl, osl, _rate(b.req_rate), levels)


def concurrencies(v: list[int | str] | str | int | None) -> tuple[int, ...]:
    """srtctl's spellings: 4, "4", "4x8x16", [4, 8, "16"]."""
    items: list[int | str] = list(v) if isinstance(v, list) else str(v).split("x")
    out = []
    for item in items:
        text = str(item).strip()
        if not text.isdigit() or not 1 <= int(text) <= MAX_CONCURRENCY:
            raise KeyedError("benchmark.concurrencies", f"{item!r} is not a concurrency (an integer 1..{MAX_CONCURRENCY}; "
                                                        "several as a list or \"4x8x16\")")
        out.append(int(text))
    if not out or len(out) > MAX_LEVELS:
        raise KeyedError("benchmark.concurrencies", f"between 1 and {MAX_LEVELS} concurrencies")
    return tuple(out)


def _length(key: str, v: int) -> int:
    return _bounded(key, v, v, 1, MAX_LENGTH)


def _bounded(key: str, v: int | None, default: int, lo: int, hi: int) -> int:
    v = default if v is None else v
    if not lo <= v <= hi:
        raise KeyedError(f"benchmark.{key}", f"benchmark.{key} must be between {lo} and {hi} (got {v})")
    return v


def _rate(v: str | int | float | None) -> str:
    text = "inf" if v is None else str(v).strip()
    if text == "inf":
        return text
    try:
        rate = float(text)
    except ValueError:
        rate = -1.0
    if not 0 < rate <= 1e6:
        raise KeyedError("benchmark.req_rate", f"req_rate must be \"inf\" or requests per second in (0, 1e6] (got {v!r})")
    return repr(rate) if isinstance(v, float) or "." in text else str(int(rate))
