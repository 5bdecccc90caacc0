"""The bundled tiny base model: a synthetic corpus of small Python programs in the task formats
(`programs`, `corpus`), its BPE tokenizer (`tokenizer`), model training (`train`), ability measurement
(`bench`), the fixed held-out probe sets and their scoring (`probe`) and the `populora pretrain-tiny`
command. Imports torch/transformers only inside functions.
"""
