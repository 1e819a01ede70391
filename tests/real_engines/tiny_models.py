"""Make the real-engine tier's tiny models: random weights, a tokenizer trained here.

Run by the engines' venv (tests/real_engines/install.sh puts transformers, tokenizers,
torch and gguf there), not by the project's: `python tiny_models.py vllm|gguf DIR`.

Both models are a Llama of 256 wide, 4 layers, 4 heads and 32,768 positions with a
byte-level BPE of 4,096 tokens and a ChatML chat template: big enough for 16k-token
prompts and chunked prefill, small enough (about 11 MB) to make in seconds. Their
output is random text, which is all the tests need: they count tokens and time frames.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

HIDDEN = 256
LAYERS = 4
HEADS = 4
FFN = 768
VOCAB = 4096
POSITIONS = 32_768
RMS_EPS = 1e-5
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SEED = 29


def corpus(lines: int = 20_000) -> list[str]:
    """Made-up sentences of made-up words: enough variety for 4,096 merges."""
    rng = random.Random(SEED)
    syllables = [a + b for a in "bcdfghklmnprstvwz" for b in "aeiou"] + list("aeiou")
    words = ["".join(rng.choices(syllables, k=rng.randint(1, 4))) for _ in range(3000)]
    words += ["the", "agent", "rig", "token", "prompt", "cache", "decode", "prefill"]
    return [" ".join(rng.choices(words, k=rng.randint(5, 20))) + rng.choice(".,!?")
            for _ in range(lines)]


def train_tokenizer():  # -> tokenizers.Tokenizer
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=list(SPECIALS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator(corpus(), trainer)
    return tokenizer


def make_vllm(out: Path) -> None:
    """A transformers LlamaForCausalLM in bf16 safetensors, and its fast tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(SEED)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=train_tokenizer(), bos_token="<|endoftext|>",
        eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token="<|endoftext|>")
    tokenizer.chat_template = CHAT_TEMPLATE
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=HIDDEN, intermediate_size=FFN,
        num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=HEADS,
        max_position_embeddings=POSITIONS, rms_norm_eps=RMS_EPS, torch_dtype="bfloat16",
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def make_gguf(out: Path) -> None:
    """A llama GGUF with a `gpt2` BPE tokenizer (the same training) and ChatML."""
    import gguf
    import numpy as np

    tokenizer = train_tokenizer()
    model = json.loads(tokenizer.to_str())["model"]
    by_id = sorted(model["vocab"].items(), key=lambda item: item[1])
    tokens = [token for token, _ in by_id]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    specials = {tokenizer.token_to_id(s) for s in SPECIALS}

    writer = gguf.GGUFWriter(str(out), "llama")
    writer.add_name("tiny")
    writer.add_context_length(POSITIONS)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(HEADS)
    writer.add_rope_dimension_count(HIDDEN // HEADS)
    writer.add_layer_norm_rms_eps(RMS_EPS)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL if i in specials else gguf.TokenType.NORMAL
                            for i in range(len(tokens))])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokenizer.token_to_id("<|endoftext|>"))
    writer.add_eos_token_id(tokenizer.token_to_id("<|im_end|>"))
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)

    rng = np.random.default_rng(SEED)

    def weight(rows: int, cols: int) -> np.ndarray:  # numpy (out, in), as GGUF stores it
        return (rng.standard_normal((rows, cols)) * 0.02).astype(np.float16)

    def norm() -> np.ndarray:
        return np.ones(HIDDEN, dtype=np.float32)

    writer.add_tensor("token_embd.weight", weight(len(tokens), HIDDEN))
    for layer in range(LAYERS):
        block = f"blk.{layer}"
        writer.add_tensor(f"{block}.attn_norm.weight", norm())
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(f"{block}.{name}.weight", weight(HIDDEN, HIDDEN))
        writer.add_tensor(f"{block}.ffn_norm.weight", norm())
        writer.add_tensor(f"{block}.ffn_gate.weight", weight(FFN, HIDDEN))
        writer.add_tensor(f"{block}.ffn_up.weight", weight(FFN, HIDDEN))
        writer.add_tensor(f"{block}.ffn_down.weight", weight(HIDDEN, FFN))
    writer.add_tensor("output_norm.weight", norm())
    writer.add_tensor("output.weight", weight(len(tokens), HIDDEN))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    kind, target = sys.argv[1], Path(sys.argv[2])
    {"vllm": make_vllm, "gguf": make_gguf}[kind](target)
