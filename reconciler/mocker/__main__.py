"""python -m reconciler.mocker --port P [...]"""

from __future__ import annotations

import argparse
import os
import sys

from aiohttp import web

from reconciler.mocker.engine import EngineConfig
from reconciler.mocker.server import MockerServer, ServerConfig, log
from reconciler.mocker.tokenizer import vocabulary


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m reconciler.mocker", description="GPU-less OpenAI-compatible mock engine")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--mode", choices=["agg", "prefill", "decode"], default="agg")
    p.add_argument("--model-name", default="mock-model")
    p.add_argument("--model-path", default=None, help="a model directory: its tokenizer.json, when there, counts "
                                                      "prompts and shapes the output tokens")
    p.add_argument("--speedup-ratio", type=float, default=1.0, help="divide simulated step times by this; 0 = no delay")
    p.add_argument("--decode-speedup-ratio", type=float, default=1.0)
    p.add_argument("--num-gpu-blocks", type=int, default=16384)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--max-num-batched-tokens", type=int, default=8192)
    p.add_argument("--max-model-len", type=int, default=None,
                   help="prompt + max_tokens bound (default: what the KV cache holds); beyond it: 400")
    p.add_argument("--request-timeout", type=float, default=30.0, help="seconds a client may take to send its body")
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--startup-time", type=float, default=0.0, help="seconds /health answers 503 before 200")
    p.add_argument("--crash-after", type=float, default=None, help="fault: print a FATAL line and exit 3 after SEC")
    p.add_argument("--crash-on-nodes", default=None,
                   help="faults apply only on these Slurm nodes (comma list; $SLURMD_NODENAME): a node-bound failure")
    p.add_argument("--hang-after", type=float, default=None, help="fault: print a FATAL line and stop answering after SEC")
    p.add_argument("--emit-tokens", type=int, default=None,
                   help="fault: answers carry at most N tokens (0: empty answers that still succeed)")
    args = p.parse_args(argv)
    for name in ("num_gpu_blocks", "block_size", "max_num_seqs", "max_num_batched_tokens", "max_model_len"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.emit_tokens is not None and args.emit_tokens < 0:
        p.error("--emit-tokens must be >= 0")
    if args.speedup_ratio < 0:
        p.error("--speedup-ratio must be >= 0")
    return args


def main(argv: list[str] | None = None) -> None:
    a = parse(argv)
    ecfg = EngineConfig(
        mode=a.mode, speedup_ratio=a.speedup_ratio, decode_speedup_ratio=a.decode_speedup_ratio,
        num_gpu_blocks=a.num_gpu_blocks, block_size=a.block_size, max_num_seqs=a.max_num_seqs,
        max_num_batched_tokens=a.max_num_batched_tokens, enable_prefix_caching=a.enable_prefix_caching,
        max_model_len=a.max_model_len,
    )
    here = os.environ.get("SLURMD_NODENAME", "")
    # a node-bound fault (a bad GPU, a broken mount): elsewhere the engine is healthy
    faulty = a.crash_on_nodes is None or here in a.crash_on_nodes.split(",")
    scfg = ServerConfig(host=a.host, port=a.port, model_name=a.model_name, startup_time=a.startup_time,
                        crash_after=a.crash_after if faulty else None, hang_after=a.hang_after if faulty else None, request_timeout=a.request_timeout,
                        model_path=a.model_path, emit_tokens=a.emit_tokens)
    vocab, which = vocabulary(a.model_path)
    server = MockerServer(scfg, ecfg, vocab)
    log("INFO", f"starting mode={a.mode} model={a.model_name} port={a.port} speedup={a.speedup_ratio:g} "
        f"blocks={a.num_gpu_blocks}x{a.block_size} max_num_seqs={a.max_num_seqs} tokens: {which}")
    try:
        # handler_cancellation: a client that leaves cancels its request (and frees its KV blocks)
        web.run_app(server.app(), host=a.host, port=a.port, print=None, access_log=None, handle_signals=True,
                    shutdown_timeout=2.0, handler_cancellation=True,
                    keepalive_timeout=a.request_timeout)  # also closes a connection whose headers never end
    except OSError as e:
        log("FATAL", f"cannot listen on {a.host}:{a.port}: {e.strerror or e}")
        sys.exit(2)


if __name__ == "__main__":
    main()
