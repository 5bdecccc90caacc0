"""PEFT's `is_gradient_checkpointing` FutureWarning is filtered around our PEFT calls (eval, the benches), and
nothing else is (issue 53: it printed on every eval and bench)."""

import warnings

from peft import LoraConfig, get_peft_model
from transformers import Qwen2Config, Qwen2ForCausalLM

from populora.lora.peft_io import quiet_peft_deprecation


def _wrap(quiet: bool) -> list[str]:
    model = Qwen2ForCausalLM(
        Qwen2Config(
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            intermediate_size=64,
            vocab_size=100,
        )
    )
    cfg = LoraConfig(r=2, target_modules=["q_proj"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if quiet:
            with quiet_peft_deprecation():
                get_peft_model(model, cfg, adapter_name="a0")
                warnings.warn("the user's own warning", FutureWarning, stacklevel=1)
        else:
            get_peft_model(model, cfg, adapter_name="a0")
    return [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]


def test_the_peft_deprecation_is_quiet_and_other_warnings_are_not():
    # Without the filter this PEFT/transformers pair warns (so the test can fail); with it, only the user's warning.
    assert any("is_gradient_checkpointing" in m for m in _wrap(quiet=False))
    assert _wrap(quiet=True) == ["the user's own warning"]
