"""A weightless model directory: a real byte-level BPE tokenizer plus the config files.

What ``dynamo.mocker`` and the built-in mocker need from a model path (both read only
the tokenizer and the shape in ``config.json``), built offline in well under a second
from a seeded synthetic corpus. ``dynamo.mocker`` emits output ids in [1000, 2000), so
the vocabulary is larger than that and every id there decodes to visible text.

Usage: ``python -m reconciler.mocker.model_dir DIR [--vocab N]``.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
_CONSONANTS = "bcdfghklmnprstvwz"
_VOWELS = "aeiou"


def _corpus(seed: int, lines: int = 12000) -> list[str]:
    rng = random.Random(seed)

    def syllable() -> str:
        return rng.choice(_CONSONANTS) + rng.choice(_VOWELS) + rng.choice(("", "", "n", "s", "r", "t"))

    words = ["".join(syllable() for _ in range(rng.randint(1, 3))) for _ in range(5000)]
    text = [" ".join(rng.choice(words) for _ in range(10)) + rng.choice(".,!?") for _ in range(lines)]
    return text + ["The quick brown fox jumps over the lazy dog 0 1 2 3 4 5 6 7 8 9."] * 20


def make_model_dir(path: str | Path, vocab_size: int = 4096, seed: int = 7) -> Path:
    """Write tokenizer.json, tokenizer_config.json, config.json, generation_config.json into ``path``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIALS), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_corpus(seed), trainer=trainer)
    n = tok.get_vocab_size()
    if n < 2000:
        raise RuntimeError(f"the tokenizer learnt only {n} tokens; dynamo.mocker needs at least 2000")
    tok.save(str(out / "tokenizer.json"))
    ids = {s: tok.token_to_id(s) for s in SPECIALS}
    _write(out / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": None, "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>", "unk_token": None, "model_max_length": 32768, "add_bos_token": False,
        "add_eos_token": False, "clean_up_tokenization_spaces": False, "chat_template": CHAT_TEMPLATE,
    })
    # a qwen2-shaped config: the mocker sizes its KV cache from layers, heads and hidden size
    _write(out / "config.json", {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "max_position_embeddings": 32768, "vocab_size": n, "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"], "torch_dtype": "bfloat16", "tie_word_embeddings": True,
    })
    _write(out / "generation_config.json", {"bos_token_id": ids["<|endoftext|>"],
                                            "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]]})
    return out


def _write(path: Path, doc: dict) -> None:
    path.write_text(json.dumps(doc, indent=2) + "\n")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m reconciler.mocker.model_dir", description=__doc__.split("\n")[0])
    p.add_argument("dir")
    p.add_argument("--vocab", type=int, default=4096)
    a = p.parse_args(argv)
    out = make_model_dir(a.dir, a.vocab)
    print(f"wrote {out}: {', '.join(sorted(f.name for f in out.iterdir()))}")


if __name__ == "__main__":
    main()
