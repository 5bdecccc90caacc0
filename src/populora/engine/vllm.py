"""The vllm PolicyEngine: vLLM multi-LoRA generation (one `LoRARequest` per slot) + hf-engine training.

Training, adapters and optimiser state live in an `HFEngine` (same API, same slots). vLLM only samples:
each slot is a LoRA adapter named `slot<k>` with the stable int id `k + 1`. A slot whose weights changed
(`train_step`, `set_adapter`, `load_adapter`, `reset_slot`, `load_optimizer_state` does not count) is
marked stale; before the next `generate` every stale slot is written as a PEFT folder under a scratch
directory (`/dev/shm` when present) and refreshed in vLLM with `remove_lora(id)` + `add_lora(LoRARequest(
name, id, path))`, then the prefix cache is reset (as RL frameworks do for weight updates). vLLM folds
`alpha/r` into its copy of B; the trainer's tensors are never shared with it.

Needs `vllm` (the `gpu` extra) and, in practice, a GPU; it is not exercised by the CPU test-suite beyond
the clear error when vllm is missing.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from populora.engine.hf import HFEngine
from populora.engine.types import EngineError, Generation, GenRequest, TrainBatch
from populora.lora.adapter import LoRAAdapter

VLLM_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # max_lora_rank values vLLM accepts


def require_vllm():
    try:
        import vllm
    except ImportError as e:
        raise EngineError(
            "backend='vllm' needs the vllm package (`pip install 'populora[gpu]'`, on a GPU machine); "
            "use backend='hf' on CPU."
        ) from e
    return vllm


class VLLMEngine:
    """Generation in vLLM with one LoRA per slot; everything else delegated to an `HFEngine`."""

    backend = "vllm"

    def __init__(
        self,
        model,
        tokenizer,
        *,
        n_slots: int = 8,
        rank: int,
        alpha: float,
        targets=None,
        device: str = "cuda",
        model_name: str | None = None,
        gpu_memory_utilization: float = 0.5,
        max_model_len: int | None = None,
        vllm_dtype: str = "auto",
        enforce_eager: bool = False,
        scratch_dir: str | None = None,
        **hf_options,
    ) -> None:
        vllm = require_vllm()
        if model_name is None or not Path(model_name).is_dir():
            raise EngineError(
                "backend='vllm' needs a model folder or hub id (build(model=...)), not an in-memory model."
            )
        self.hf = HFEngine(
            model,
            tokenizer,
            n_slots=n_slots,
            rank=rank,
            alpha=alpha,
            targets=targets,
            device=device,
            model_name=model_name,
            **hf_options,
        )
        self.n_slots, self.tokenizer = self.hf.n_slots, tokenizer
        max_rank = next((r for r in VLLM_RANKS if r >= rank), None)
        if max_rank is None:
            raise EngineError(f"rank {rank} is above vLLM's largest max_lora_rank {VLLM_RANKS[-1]}.")
        kwargs = dict(
            model=model_name,
            enable_lora=True,
            max_loras=n_slots,
            max_lora_rank=max_rank,
            max_cpu_loras=n_slots,
            dtype=vllm_dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            enforce_eager=enforce_eager,
            seed=self.hf.seed,
        )
        if max_model_len:
            kwargs["max_model_len"] = max_model_len
        self.llm = vllm.LLM(**kwargs)
        root = scratch_dir or ("/dev/shm" if os.path.isdir("/dev/shm") else None)
        self._scratch = Path(tempfile.mkdtemp(prefix="populora-vllm-", dir=root))
        self._stale = set(range(n_slots))
        self._loaded: set[int] = set()
        self._version = [0] * n_slots

    # ---- delegated to the hf engine (marking changed slots stale)
    def train_step(self, batch: TrainBatch) -> dict[str, float]:
        out = self.hf.train_step(batch)
        self._stale.update(r.slot for r in batch.rows)
        return out

    def get_adapter(self, slot: int) -> LoRAAdapter:
        return self.hf.get_adapter(slot)

    def set_adapter(self, slot: int, adapter: LoRAAdapter, reset_optimizer: bool = True) -> None:
        self.hf.set_adapter(slot, adapter, reset_optimizer)
        self._stale.add(int(slot))

    def reset_slot(self, slot: int, seed: int | None = None) -> None:
        self.hf.reset_slot(slot, seed)
        self._stale.add(int(slot))

    def save_adapter(self, slot: int, path: str | Path) -> None:
        self.hf.save_adapter(slot, path)

    def load_adapter(self, slot: int, path: str | Path, reset_optimizer: bool = True) -> None:
        self.hf.load_adapter(slot, path, reset_optimizer)
        self._stale.add(int(slot))

    def logprobs(self, batch: TrainBatch) -> list[list[float]]:
        return self.hf.logprobs(batch)

    def optimizer_state(self) -> dict:
        return self.hf.optimizer_state()

    def load_optimizer_state(self, state: dict) -> None:
        self.hf.load_optimizer_state(state)

    def set_lr(self, slot: int, lr: float) -> None:
        self.hf.set_lr(slot, lr)

    def get_lr(self, slot: int) -> float:
        return self.hf.get_lr(slot)

    # ---- vLLM side
    def _request(self, slot: int):
        from vllm.lora.request import LoRARequest

        return LoRARequest(f"slot{slot}", slot + 1, str(self._scratch / f"slot{slot}"))

    def _refresh(self) -> None:
        """Write every stale slot to the scratch folder and (re)load it in vLLM under its stable id."""
        if not self._stale:
            return
        engine = self.llm.llm_engine
        for slot in sorted(self._stale):
            path = self._scratch / f"slot{slot}"
            self.hf.save_adapter(slot, path)
            if slot in self._loaded:
                engine.remove_lora(slot + 1)
            engine.add_lora(self._request(slot))
            self._loaded.add(slot)
            self._version[slot] += 1
        self._stale.clear()
        if hasattr(self.llm, "reset_prefix_cache"):
            self.llm.reset_prefix_cache()  # cached KV of refreshed adapters is stale

    def generate(self, requests: list[GenRequest], seed: int | None = None) -> list[Generation]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        if not requests:
            return []
        for r in requests:
            self.hf._check_slot(r.slot)
        self._refresh()
        prompts = [self.hf.encode(r.prompt) for r in requests]
        base_seed = self.hf.seed if seed is None else seed
        params = [
            SamplingParams(
                temperature=float(r.temperature),
                top_p=float(r.top_p) if r.temperature > 0 else 1.0,
                max_tokens=int(r.max_new_tokens),
                logprobs=0,
                seed=base_seed * 1_000_003 + i,
                stop_token_ids=sorted(self.hf.eos_ids),
            )
            for i, r in enumerate(requests)
        ]
        outs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=p) for p in prompts],
            params,
            lora_request=[self._request(r.slot) for r in requests],
            use_tqdm=False,
        )
        gens = []
        for r, p, o in zip(requests, prompts, outs, strict=True):
            c = o.outputs[0]
            ids = list(c.token_ids)
            lps = [
                float(d[t].logprob) if d and t in d else float("nan")
                for t, d in zip(ids, c.logprobs or [], strict=False)
            ]
            gens.append(
                Generation(
                    token_ids=ids,
                    text=self.tokenizer.decode(ids, skip_special_tokens=True),
                    logprobs=lps,
                    finish_reason="stop" if c.finish_reason == "stop" else "length",
                    prompt_ids=p,
                    slot=r.slot,
                )
            )
        return gens

    def close(self) -> None:
        shutil.rmtree(self._scratch, ignore_errors=True)

    def __del__(self) -> None:  # best effort: the scratch folder lives in RAM (/dev/shm)
        scratch = getattr(self, "_scratch", None)
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
