"""The memory preflight's numbers for the paper's run: Qwen2.5-Coder-7B (bench/configs, nothing downloaded; a
sparse file of the bf16 weights' size stands in for the weights), paper-7b's settings, per GPU size.

Activations are measured on the CPU with the real Qwen2 class at 1-2 layers (`populora.engine.activations`)
and extrapolated to 28 layers (x1.07 without checkpointing: the whole step measured under fake tensors,
bench/memory_fake_7b.py); each row is one setting of activation checkpointing and vLLM sleep. The peaks hold
two CUDA contexts, the 1 GiB reserve, and with sleep the engine's CUDA-graph pool (`MemoryPlan`'s terms).
Usage: PYTHONPATH=src python bench/memory_plan.py [--out bench/results/memory_plan.json]
"""

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from populora.config import ConfigError, load_config
from populora.engine.activations import measure_activations
from populora.engine.memory import (
    CUDA_CONTEXT_BYTES,
    GPU_RESERVE_BYTES,
    VLLM_ASLEEP_BYTES,
    check_plan,
    memory_plan,
)

REPO = Path(__file__).resolve().parents[1]
WEIGHTS_7B = 15_231_233_024  # Qwen2.5-Coder-7B in bfloat16: 7.62e9 parameters x 2 bytes
GIB = 2**30


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(REPO / "bench/results/memory_plan.json"))
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="populora-7b-shape-"))
    try:
        shutil.copy(REPO / "bench/configs/qwen2.5-coder-7b.json", folder / "config.json")
        with open(folder / "model.safetensors", "wb") as f:
            f.truncate(WEIGHTS_7B)  # sparse: no disk used
        config = json.loads((folder / "config.json").read_text())
        cfg0 = load_config(preset="paper-7b")
        profile = measure_activations(config, cfg0.lora.rank, cfg0.lora.targets, "bfloat16")
        rows = []
        for ckpt in (False, True):
            for sleep in (False, True):
                sets = [
                    f"rl.activation_checkpointing={str(ckpt).lower()}",
                    f"model.vllm_sleep={str(sleep).lower()}",
                ]
                plan = memory_plan(load_config(preset="paper-7b", overrides=sets), folder)
                for gpu_gb in (80, 141):
                    total = gpu_gb * 10**9  # vendors' GB
                    sampling, training = plan.peaks(total)
                    try:
                        check_plan(plan, total)
                        verdict = "fits"
                    except ConfigError as err:
                        verdict = str(err)
                    rows.append(
                        dict(
                            gpu_gb=gpu_gb,
                            activation_checkpointing=ckpt,
                            vllm_sleep=sleep,
                            tokens=plan.tokens,
                            base_gib=round(plan.base / GIB, 2),
                            slots_gib=round(plan.slots / GIB, 2),
                            vllm_gib=round(plan.vllm_share * total / GIB, 2),
                            activations_gib=round(plan.activations / GIB, 2),
                            contexts_gib=round(plan.contexts / GIB, 2),
                            asleep_residue_gib=round(plan.asleep_residue / GIB, 2) if sleep else 0.0,
                            sampling_peak_gib=round(sampling / GIB, 1),
                            training_peak_gib=round(training / GIB, 1),
                            gpu_gib=round(total / GIB, 1),
                            fits=verdict == "fits",
                        )
                    )
        result = dict(
            model="Qwen2.5-Coder-7B (28 layers, hidden 3584, vocab 152064), bf16, LoRA rank 32 on q/k/v/o, 8 slots",
            per_token_per_layer_kib=round(profile.per_layer / 1024, 1),
            checkpointed_per_token_per_layer_kib=round(profile.layer_input / 1024, 1),
            rows=rows,
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(
        f"saved activations: {result['per_token_per_layer_kib']} KiB per token per layer "
        f"({result['checkpointed_per_token_per_layer_kib']} KiB checkpointed)"
    )
    print(
        f"GPU   ckpt  sleep  tokens  activ.GiB  sampling  training  of GiB  fits  (with contexts "
        f"{2 * CUDA_CONTEXT_BYTES / GIB:g} GiB, reserve {GPU_RESERVE_BYTES / GIB:g} GiB, asleep residue "
        f"{VLLM_ASLEEP_BYTES / GIB:g} GiB)"
    )
    for r in rows:
        print(
            f"{r['gpu_gb']:>3}GB  {r['activation_checkpointing']!s:5} {r['vllm_sleep']!s:5}  {r['tokens']:>6}  "
            f"{r['activations_gib']:>9}  {r['sampling_peak_gib']:>8}  {r['training_peak_gib']:>8}  "
            f"{r['gpu_gib']:>6}  {r['fits']}"
        )


if __name__ == "__main__":
    main()
