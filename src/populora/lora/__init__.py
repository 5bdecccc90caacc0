"""LoRA adapters as data (`LoRAAdapter`), PEFT-format folder I/O, and multi-slot LoRA layers.

`adapter` depends only on torch; the layers and PEFT I/O may import transformers/peft lazily.
"""

from populora.lora.adapter import AdapterError, LoRAAdapter

__all__ = ["AdapterError", "LoRAAdapter"]
