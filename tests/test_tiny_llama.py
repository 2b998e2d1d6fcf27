"""The tiny random-weights Llama: deterministic, a valid safetensors file, finite small weights."""

from __future__ import annotations

import json
import struct

from reconciler.mocker.tiny_llama import HEAD_DIM, HEADS, HIDDEN, make_tiny_llama


def _read(path):
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    return header, raw[8 + n:]


def test_same_seed_same_bytes_other_seed_other_weights(tmp_path):
    a = make_tiny_llama(tmp_path / "a")
    b = make_tiny_llama(tmp_path / "b")
    c = make_tiny_llama(tmp_path / "c", seed=8)
    for f in ("config.json", "model.safetensors", "tokenizer.json"):
        assert (a / f).read_bytes() == (b / f).read_bytes(), f
    assert (a / "model.safetensors").read_bytes() != (c / "model.safetensors").read_bytes()


def test_the_weights_are_a_loadable_llama(tmp_path):
    out = make_tiny_llama(tmp_path / "m")
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["head_dim"] == HEAD_DIM == 64
    assert config["num_attention_heads"] * config["head_dim"] == HEADS * HEAD_DIM
    header, data = _read(out / "model.safetensors")
    header.pop("__metadata__")
    assert header["model.embed_tokens.weight"]["shape"] == [config["vocab_size"], HIDDEN]
    assert "lm_head.weight" not in header and config["tie_word_embeddings"]  # tied: vLLM shares the embedding
    end = 0
    for name, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"]):
        lo, hi = t["data_offsets"]
        assert lo == end and t["dtype"] == "F16", name  # contiguous, no gap or overlap
        count = 1
        for d in t["shape"]:
            count *= d
        assert hi - lo == 2 * count, name
        end = hi
    assert end == len(data)
    values = struct.unpack(f"<{len(data) // 2}e", data)
    assert all(abs(v) <= 1.0 for v in values)  # no NaN (a NaN compares False), no infinity, nothing large
    assert sum(v == 1.0 for v in values) >= HIDDEN * 5  # the norms start at one
