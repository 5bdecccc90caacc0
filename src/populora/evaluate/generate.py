"""Greedy batched generation for evaluation, per member: base alone, or base + one LoRA adapter.

Three ways to apply an adapter, which give the same greedy text up to float rounding (tests check it):

- ``merge`` (default, as the paper): ``PeftModel.from_pretrained(base, adapter).merge_and_unload()`` and plain
  transformers batched generation (left padding, greedy, stop strings checked as tokens arrive). The base
  is reloaded from disk for every member so no merge leaks into the next one.
- ``slot``: all adapters loaded into the slots of one `populora.engine` hf engine (the training engine),
  generating mixed-member batches; stop strings are applied after generation (the engine stops on EOS).
- backend ``vllm``: one ``LoRARequest`` per member on a vLLM ``LLM`` with ``enable_lora`` (GPU machines;
  ``pip install vllm``), greedy, stop strings handled by vLLM.

Every generator returns, per prompt, the generated text cut at the first stop string.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

from populora.evaluate.prompts import Prompt, truncate_at_stop

Progress = Callable[[int], None] | None


class GenerationError(RuntimeError):
    """A user-fixable generation problem (missing model files, bad adapter); the message says the fix."""


def adapter_config(path: str | Path) -> dict:
    cfg = Path(path) / "adapter_config.json"
    if not cfg.is_file():
        raise GenerationError(f"{path} is not a PEFT adapter folder (no adapter_config.json)")
    return json.loads(cfg.read_text())


def _torch_setup(device: str) -> None:
    import torch

    if device == "cpu":
        # Small models on shared CPUs: more threads mostly add contention (README, Performance).
        torch.set_num_threads(max(1, min(torch.get_num_threads(), 2)))


def load_tokenizer(base: str | Path):
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(base), padding_side="left")
    except (OSError, ValueError) as exc:
        raise GenerationError(f"cannot load the tokenizer of base model {base}: {exc}") from exc
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def _stop_criteria(tokenizer, stops: list[list[str]], prompt_len: int):
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    class _StopStrings(StoppingCriteria):
        # Per-row done flags: a row stops once its decoded continuation contains one of its stop strings.
        def __call__(self, input_ids, scores, **kwargs):
            done = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
            for row, row_stops in enumerate(stops):
                if not row_stops:
                    continue
                text = tokenizer.decode(input_ids[row, prompt_len:], skip_special_tokens=False)
                done[row] = any(s in text for s in row_stops)
            return done

    return StoppingCriteriaList([_StopStrings()])


def hf_generate(
    model,
    tokenizer,
    prompts: Sequence[Prompt],
    max_new_tokens: int,
    batch_size: int = 8,
    progress: Progress = None,
) -> list[str]:
    """Greedy generation with a loaded transformers model (batched, left-padded, stop strings)."""
    import torch

    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i].text))
    out: list[str] = [""] * len(prompts)
    device = next(model.parameters()).device
    for s in range(0, len(order), batch_size):
        idx = order[s : s + batch_size]
        enc = tokenizer([prompts[i].text for i in idx], return_tensors="pt", padding=True)
        enc = {k: v.to(device) for k, v in enc.items()}
        plen = enc["input_ids"].shape[1]
        with torch.no_grad():
            gen = model.generate(
                **enc,
                do_sample=False,
                max_new_tokens=max_new_tokens,
                pad_token_id=tokenizer.pad_token_id,
                temperature=None,
                top_p=None,
                top_k=None,
                stopping_criteria=_stop_criteria(tokenizer, [prompts[i].stop for i in idx], plen),
            )
        for row, i in enumerate(idx):
            text = tokenizer.decode(gen[row, plen:], skip_special_tokens=True)
            out[i] = truncate_at_stop(text, prompts[i].stop)
        if progress:
            progress(len(idx))
    return out


class MergedHFGenerator:
    """``merge`` mode: a fresh base per member, the adapter merged with PEFT, transformers generation."""

    def __init__(self, base: str | Path, device: str = "cpu", dtype: str = "auto", batch_size: int = 8):
        self.base = str(base)
        self.device = device
        self.dtype = dtype
        self.batch_size = batch_size
        self.tokenizer = load_tokenizer(base)

    def _load(self, adapter: str | Path | None):
        import torch
        from transformers import AutoModelForCausalLM

        _torch_setup(self.device)
        dtype = {
            "auto": torch.float32 if self.device == "cpu" else torch.bfloat16,
            "float32": torch.float32,
            "bfloat16": torch.bfloat16,
            "float16": torch.float16,
        }[self.dtype]
        try:
            model = AutoModelForCausalLM.from_pretrained(self.base, dtype=dtype)
        except (OSError, ValueError) as exc:
            raise GenerationError(f"cannot load base model {self.base}: {exc}") from exc
        if adapter is not None:
            from peft import PeftModel

            try:
                model = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
            except (OSError, ValueError, RuntimeError) as exc:
                raise GenerationError(f"cannot apply adapter {adapter} to {self.base}: {exc}") from exc
        return model.to(self.device).eval()

    def generate(
        self,
        adapters: dict[str, str | Path | None],
        prompts: Sequence[Prompt],
        max_new_tokens: int,
        progress: Progress = None,
    ) -> dict[str, list[str]]:
        out = {}
        for member, path in adapters.items():
            model = self._load(path)
            out[member] = hf_generate(
                model, self.tokenizer, prompts, max_new_tokens, self.batch_size, progress
            )
            del model
        return out


class SlotGenerator:
    """``slot`` mode: every member's adapter in its own slot of one `populora.engine` hf engine."""

    def __init__(self, base: str | Path, device: str = "cpu", batch_size: int = 8):
        self.base = str(base)
        self.device = device
        self.batch_size = batch_size
        self.tokenizer = load_tokenizer(base)

    def generate(
        self,
        adapters: dict[str, str | Path | None],
        prompts: Sequence[Prompt],
        max_new_tokens: int,
        progress: Progress = None,
    ) -> dict[str, list[str]]:
        from populora.engine import GenRequest, build

        paths = [p for p in adapters.values() if p is not None]
        cfg = adapter_config(paths[0]) if paths else {"r": 8, "lora_alpha": 16, "target_modules": None}
        for p in paths[1:]:
            other = adapter_config(p)
            if (other["r"], other["lora_alpha"]) != (cfg["r"], cfg["lora_alpha"]):
                raise GenerationError(
                    f"adapters differ in rank/alpha ({p}); evaluate them with --apply merge"
                )
        targets = cfg.get("target_modules")
        targets = sorted(targets) if isinstance(targets, list | set | tuple) else targets
        _torch_setup(self.device)
        engine = build(
            model=self.base,
            n_slots=len(adapters),
            rank=int(cfg["r"]),
            alpha=float(cfg["lora_alpha"]),
            targets=targets,
            device=self.device,
            tokenizer=self.tokenizer,
            gen_batch_size=self.batch_size,
        )
        slots = {}
        for slot, (member, path) in enumerate(adapters.items()):
            if path is None:
                engine.reset_slot(slot)  # B = 0: exactly the base model
            else:
                engine.load_adapter(slot, path)
            slots[member] = slot
        reqs = [
            GenRequest(slot=slots[m], prompt=p.text, max_new_tokens=max_new_tokens, temperature=0.0)
            for m in adapters
            for p in prompts
        ]
        gens = engine.generate(reqs)
        if progress:
            progress(len(reqs))
        out: dict[str, list[str]] = {}
        k = 0
        for m in adapters:
            out[m] = [
                truncate_at_stop(g.text, p.stop)
                for g, p in zip(gens[k : k + len(prompts)], prompts, strict=True)
            ]
            k += len(prompts)
        return out


class VLLMGenerator:
    """backend ``vllm``: one ``LoRARequest`` per member, greedy, on a GPU."""

    def __init__(self, base: str | Path, max_model_len: int | None = None):
        try:
            from vllm import LLM  # noqa: F401
        except ImportError as exc:
            raise GenerationError(
                "--backend vllm needs vLLM on a GPU machine: pip install 'populora[gpu]'"
            ) from exc
        self.base = str(base)
        self.max_model_len = max_model_len
        self.tokenizer = load_tokenizer(base)
        self._llm = None

    def generate(
        self,
        adapters: dict[str, str | Path | None],
        prompts: Sequence[Prompt],
        max_new_tokens: int,
        progress: Progress = None,
    ) -> dict[str, list[str]]:
        from vllm import LLM, SamplingParams
        from vllm.lora.request import LoRARequest

        ranks = [int(adapter_config(p)["r"]) for p in adapters.values() if p is not None]
        if self._llm is None:
            kw = {"max_model_len": self.max_model_len} if self.max_model_len else {}
            self._llm = LLM(
                model=self.base,
                enable_lora=bool(ranks),
                max_lora_rank=max(ranks or [8]),
                max_loras=max(1, min(len(ranks), 8)),
                **kw,
            )
        out = {}
        for n, (member, path) in enumerate(adapters.items(), start=1):
            params = [
                SamplingParams(temperature=0.0, top_p=1.0, max_tokens=max_new_tokens, stop=p.stop or None)
                for p in prompts
            ]
            req = LoRARequest(member, n, str(path)) if path is not None else None
            res = self._llm.generate([p.text for p in prompts], params, lora_request=req, use_tqdm=False)
            out[member] = [
                truncate_at_stop(r.outputs[0].text, p.stop) for r, p in zip(res, prompts, strict=True)
            ]
            if progress:
                progress(len(prompts))
        return out


def make_generator(
    base: str | Path, backend: str = "hf", apply: str = "merge", device: str = "cpu", batch_size: int = 8
):
    """The generator for ``--backend`` / ``--apply``."""
    if backend == "vllm":
        return VLLMGenerator(base)
    if backend != "hf":
        raise GenerationError(f"unknown backend {backend!r}; choose hf or vllm")
    if apply == "merge":
        return MergedHFGenerator(base, device=device, batch_size=batch_size)
    if apply == "slot":
        return SlotGenerator(base, device=device, batch_size=batch_size)
    raise GenerationError(f"unknown --apply {apply!r}; choose merge or slot")
