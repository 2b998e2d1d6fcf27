"""A tiny Llama with random weights that real engines (vLLM's CPU build) load and run.

The weightless model directory of ``reconciler.mocker.model_dir`` (a real byte-level BPE
tokenizer, a chat template) plus a Llama ``config.json`` and a ``model.safetensors`` of
random float16 weights: 2 layers, hidden 256, 4 heads of 64 (vLLM's CPU attention kernel
refuses head_dim 16), tied embeddings -- 2.4 M float16 parameters, 4.7 MB, written in well
under a second with the standard library alone, byte for byte the same for one seed.

The weights are random, so the text is nonsense; what is real is everything around it:
the engine's argument parser, its import, model load, KV-cache profile and warm-up, its
scheduler, HTTP server, health and metrics.

Usage: ``python -m reconciler.mocker.tiny_llama DIR [--seed N]``.
"""

from __future__ import annotations

import argparse
import json
import random
import struct
from pathlib import Path

from reconciler.mocker.model_dir import make_model_dir

HIDDEN, INTERMEDIATE, LAYERS, HEADS, HEAD_DIM = 256, 512, 2, 4, 64
MAX_POSITIONS = 2048
_ONE_F16 = struct.pack("<e", 1.0)


def _random_f16(rng: random.Random, count: int) -> bytes:
    """``count`` float16 values of magnitude below 2**-4, from random bytes.

    Each high byte keeps its sign and top mantissa bits and gets an exponent of 7..10
    (of 31), so no value is a NaN, an infinity or large enough to overflow a layer --
    made in C (translate, slice assignment), not a Python loop per weight."""
    raw = bytearray(rng.randbytes(2 * count))
    table = bytes((h & 0b1000_0011) | ((0b00111 + ((h >> 2) & 0b11)) << 2) for h in range(256))
    raw[1::2] = raw[1::2].translate(table)
    return bytes(raw)


def _tensors(vocab: int) -> list[tuple[str, tuple[int, ...]]]:
    """Hugging Face's Llama names and shapes (``[out, in]``), embeddings tied to the head."""
    out: list[tuple[str, tuple[int, ...]]] = [("model.embed_tokens.weight", (vocab, HIDDEN))]
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", (HIDDEN,)), (p + "post_attention_layernorm.weight", (HIDDEN,))]
        out += [(p + f"self_attn.{n}_proj.weight", (HEADS * HEAD_DIM, HIDDEN)) for n in "qkv"]
        out += [(p + "self_attn.o_proj.weight", (HIDDEN, HEADS * HEAD_DIM))]
        out += [(p + "mlp.gate_proj.weight", (INTERMEDIATE, HIDDEN)), (p + "mlp.up_proj.weight", (INTERMEDIATE, HIDDEN)),
                (p + "mlp.down_proj.weight", (HIDDEN, INTERMEDIATE))]
    return out + [("model.norm.weight", (HIDDEN,))]


def write_safetensors(path: Path, vocab: int, seed: int) -> int:
    """Write the weights in the safetensors layout (a little-endian header length, a JSON
    header of names, dtypes, shapes and byte ranges, then the data); return the parameter count."""
    rng = random.Random(seed)
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    blobs, offset = [], 0
    for name, shape in _tensors(vocab):
        count = 1
        for d in shape:
            count *= d
        # norms start at one, as a trained model's roughly are; everything else random
        blob = _ONE_F16 * count if name.endswith("layernorm.weight") or name == "model.norm.weight" \
            else _random_f16(rng, count)
        header[name] = {"dtype": "F16", "shape": list(shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for blob in blobs:
            f.write(blob)
    return offset // 2


def make_tiny_llama(path: str | Path, seed: int = 7) -> Path:
    """Write a loadable Llama directory at ``path``: tokenizer files, config.json,
    generation_config.json, model.safetensors."""
    out = make_model_dir(path, seed=seed)
    vocab = json.loads((out / "config.json").read_text())["vocab_size"]
    tok = json.loads((out / "generation_config.json").read_text())
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS, "head_dim": HEAD_DIM, "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "vocab_size": vocab, "hidden_act": "silu",
        "bos_token_id": tok["bos_token_id"], "eos_token_id": tok["eos_token_id"][0],
        "tie_word_embeddings": True, "torch_dtype": "float16",
    }
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    write_safetensors(out / "model.safetensors", vocab, seed)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m reconciler.mocker.tiny_llama", description=__doc__.split("\n")[0])
    p.add_argument("dir")
    p.add_argument("--seed", type=int, default=7)
    a = p.parse_args(argv)
    out = make_tiny_llama(a.dir, a.seed)
    size = (out / "model.safetensors").stat().st_size
    print(f"wrote {out}: {', '.join(sorted(f.name for f in out.iterdir()))} ({size / 1e6:.1f} MB of weights)")


if __name__ == "__main__":
    main()
