"""Byte-level BPE for the tiny model, trained with exactly Qwen2's normalizer and pre-tokenizer.

transformers 5 rebuilds the normalizer and pre-tokenizer of any `model_type=qwen2` tokenizer
(`Qwen2Tokenizer`: NFC, Qwen's split regex, then ByteLevel without its own regex) and ignores the ones
saved in `tokenizer.json`. Training with anything else gives a tokenizer whose ids silently change
after `AutoTokenizer.from_pretrained` (measured when the project was planned). Qwen's regex also splits numbers into
single digits, which suits the arithmetic in program outputs.
"""

from __future__ import annotations

from collections.abc import Iterable

QWEN_RE = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
    r"""\s*[\r\n]+|\s+(?!\S)|\s+"""
)
EOS = "<|endoftext|>"
PAD = "<|pad|>"
SPECIAL_TOKENS = [EOS, PAD, "<|im_start|>", "<|im_end|>"]


def train_tokenizer(texts: Iterable[str], vocab_size: int = 4096):
    """Train the BPE on `texts` and wrap it as a `PreTrainedTokenizerFast` (EOS = BOS, pad left)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.decoder = decoders.ByteLevel()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_RE), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=EOS, eos_token=EOS, pad_token=PAD)
    # Only values in init_kwargs are saved; without this the tokenizer reloads with right padding.
    hf.init_kwargs["padding_side"] = "left"
    hf.padding_side = "left"
    return hf
