"""Tiny random HF causal LMs and a byte-level tokenizer, built in memory (tests and benchmarks; no downloads)."""

from __future__ import annotations

from typing import Any

SPECIALS = ["<|endoftext|>", "<|pad|>", "<|im_start|>", "<|im_end|>"]


def byte_tokenizer():
    """A byte-level BPE tokenizer with no merges: 256 byte tokens + 4 specials (`<|endoftext|>` = EOS/BOS)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    for s in SPECIALS:
        vocab[s] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        pad_token="<|pad|>",
        padding_side="left",
    )
    hf.init_kwargs["padding_side"] = "left"
    return hf


def random_model(arch: str = "qwen2", seed: int = 0, **overrides: Any):
    """`(model, tokenizer)`: a random-init Qwen2 or Llama causal LM (eval mode, float32) and `byte_tokenizer()`.

    Defaults are tiny (hidden 64, 2 layers, GQA 4/2); `overrides` go into the config (e.g. the shape of
    Qwen2.5-0.5B: hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
    num_key_value_heads=2, vocab_size=151936).
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    tok = byte_tokenizer()
    cfg: dict[str, Any] = dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=len(tok),
        max_position_embeddings=512,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True,
    )
    cfg.update(overrides)
    torch.manual_seed(seed)
    if arch == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**cfg))
    elif arch == "llama":
        model = LlamaForCausalLM(LlamaConfig(**cfg))
    else:
        raise ValueError(f"arch must be 'qwen2' or 'llama', got {arch!r}")
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    return model.eval(), tok


def peft_model_with(base, adapter, adapter_name: str = "default"):
    """A PEFT `PeftModel` over a deep copy of `base` holding exactly `adapter` (the reference in tests/bench).

    Weights are copied into PEFT's modules directly (not through files), so this is independent of
    `populora.lora.peft_io`.
    """
    import copy

    from peft import LoraConfig, get_peft_model

    targets = sorted({n.rsplit(".", 1)[-1] for n in adapter.modules})
    cfg = LoraConfig(
        r=adapter.rank,
        lora_alpha=adapter.alpha,
        target_modules=targets,
        lora_dropout=0.0,
        init_lora_weights=False,
    )
    pm = get_peft_model(copy.deepcopy(base), cfg, adapter_name=adapter_name)
    add_peft_adapter(pm, adapter, adapter_name)
    return pm.eval()


def add_peft_adapter(pm, adapter, adapter_name: str) -> None:
    """Add (or overwrite) `adapter_name` in PeftModel `pm` with the factors of `adapter`."""
    import torch
    from peft import LoraConfig

    if adapter_name not in pm.peft_config:
        targets = sorted({n.rsplit(".", 1)[-1] for n in adapter.modules})
        pm.add_adapter(
            adapter_name,
            LoraConfig(
                r=adapter.rank,
                lora_alpha=adapter.alpha,
                target_modules=targets,
                lora_dropout=0.0,
                init_lora_weights=False,
            ),
        )
    inner = pm.base_model.model
    with torch.no_grad():
        for name, (a, b) in adapter.modules.items():
            mod = inner.get_submodule(name)
            mod.lora_A[adapter_name].weight.copy_(a)
            mod.lora_B[adapter_name].weight.copy_(b)
