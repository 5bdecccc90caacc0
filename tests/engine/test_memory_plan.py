"""The GPU memory preflight (issue 32): activations measured on the real architecture at reduced depth and
extrapolated per layer, the train-step peak on hand numbers, and the one-line refusals naming the keys."""

from __future__ import annotations

import pytest

from populora.config import ConfigError, load_config
from populora.engine import resolve_model
from populora.engine.activations import (
    LOGIT_BYTES_PER_ENTRY,
    ActivationProfile,
    measure_activations,
    measure_saved_bytes,
    train_step_bytes,
)
from populora.engine.memory import GPU_RESERVE_BYTES, MemoryPlan, check_plan, longest_micro_batch, memory_plan

GIB = 2**30
# A small Qwen2 (the real class, built on the fly): 3 layers, GQA, untied head.
QWEN = dict(
    model_type="qwen2",
    hidden_size=64,
    intermediate_size=176,
    num_attention_heads=4,
    num_key_value_heads=2,
    num_hidden_layers=3,
    vocab_size=1000,
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,
)


def test_per_layer_extrapolation_matches_a_deeper_measurement():
    """Measured at 1-2 layers and 8-16 tokens, the profile predicts 3 layers at 24 tokens exactly (saved
    activations are linear in layers and, with sdpa, in tokens)."""
    targets = ["q_proj", "v_proj"]
    p = measure_activations(QWEN, 4, targets, "float32")
    assert p.per_layer > 10 * 64 * 4  # a layer keeps over ten hidden-sized tensors, not one
    assert p.layer_input == 64 * 4
    deep = measure_saved_bytes(
        QWEN, layers=3, tokens=24, rank=4, targets=targets, dtype=__import__("torch").float32
    )
    assert deep == pytest.approx(24 * (3 * p.per_layer + p.fixed), rel=1e-9)


def test_train_step_bytes_hand_numbers():
    p = ActivationProfile(per_layer=1000.0, fixed=10.0, layer_input=100.0)
    # no checkpointing: 50 tokens x (4 layers x 1000 + one more layer in backward + 10) + 8-token logit chunk
    plain = train_step_bytes(p, layers=4, vocab=7, tokens=50, checkpointing=False, logit_chunk_tokens=8)
    assert plain == 50 * (4 * 1000 + 1000 + 10) + 8 * 7 * LOGIT_BYTES_PER_ENTRY
    ckpt = train_step_bytes(p, layers=4, vocab=7, tokens=50, checkpointing=True, logit_chunk_tokens=0)
    assert ckpt == 50 * (4 * 100 + 1000 + 10) + 50 * 7 * LOGIT_BYTES_PER_ENTRY


def test_plan_peaks_and_refusals_name_the_keys():
    plan = MemoryPlan(
        base=15 * GIB,
        slots=3 * GIB,
        n_slots=8,
        activations=30 * GIB,
        tokens=6144,
        checkpointing=False,
        vllm_share=0.5,
        sleeps=False,
    )
    sampling, training = plan.peaks(80 * GIB)
    assert sampling == 15 * GIB + 3 * GIB + GPU_RESERVE_BYTES + 40 * GIB
    assert training == sampling + 30 * GIB
    with pytest.raises(ConfigError) as err:
        check_plan(plan, 80 * GIB)
    msg = str(err.value)
    assert (
        "6144 tokens" in msg and "rl.activation_checkpointing=true" in msg and "model.vllm_sleep=true" in msg
    )
    assert "\n" not in msg
    asleep = MemoryPlan(**{**plan.__dict__, "sleeps": True})
    check_plan(asleep, 80 * GIB)  # vLLM's 40 GiB go to the backward pass: 50 GiB fit
    with pytest.raises(ConfigError, match="model.vllm_gpu_memory_utilization"):
        check_plan(MemoryPlan(**{**plan.__dict__, "vllm_share": 0.9}), 80 * GIB)
    with pytest.raises(ConfigError, match="GPU 0 has 50.0 GiB free"):
        check_plan(asleep, 80 * GIB, "GPU 0", free_bytes=50 * GIB)


def test_memory_plan_of_the_tiny_model_and_the_longest_row():
    cfg = load_config(
        preset="tiny", overrides=["tasks.student_max_new_tokens=3000", "rl.micro_batch_tokens=512"]
    )
    assert longest_micro_batch(cfg) == 2048 + 3000  # a row longer than the budget runs alone
    plain = memory_plan(cfg, resolve_model("tiny"), "float32")
    ckpt = memory_plan(
        load_config(
            preset="tiny", overrides=["tasks.student_max_new_tokens=3000", "rl.activation_checkpointing=true"]
        ),
        resolve_model("tiny"),
        "float32",
    )
    assert plain.tokens == 5048 and 0 < ckpt.activations < plain.activations
    assert plain.vllm_share == 0.0 and not plain.sleeps


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_on_a_cpu_only_torch_is_one_line():
    from populora.engine import EngineError, build
    from populora.train.errors import TrainError
    from populora.train.setup import preflight

    with pytest.raises(TrainError) as err:
        preflight(load_config(preset="tiny", overrides=["model.device=cuda"]))
    assert str(err.value).startswith("model.device=cuda: this torch") and "model.device=cpu" in str(err.value)
    assert "\n" not in str(err.value)
    with pytest.raises(EngineError, match=r"device='cuda': this torch .*constraints/gpu.txt"):
        build("tiny", device="cuda")


def test_plan_counts_cuda_contexts_and_the_sleeping_engines_residue():
    """Issue 51: two CUDA contexts with vLLM (trainer, engine core), one without; a sleeping vLLM keeps its
    CUDA-graph pool, which the train step's peak counts instead of vLLM's share."""
    from populora.engine.memory import CUDA_CONTEXT_BYTES, VLLM_ASLEEP_BYTES

    vllm = memory_plan(
        load_config(preset="tiny", overrides=["model.device=cuda", "model.backend=vllm"]),
        resolve_model("tiny"),
        "float32",
    )
    assert vllm.contexts == 2 * CUDA_CONTEXT_BYTES and vllm.asleep_residue == VLLM_ASLEEP_BYTES
    hf = memory_plan(load_config(preset="tiny"), resolve_model("tiny"), "float32")
    assert hf.contexts == CUDA_CONTEXT_BYTES and hf.asleep_residue == 0
    plan = MemoryPlan(
        base=10 * GIB,
        slots=2 * GIB,
        n_slots=8,
        activations=5 * GIB,
        tokens=6144,
        checkpointing=True,
        vllm_share=0.5,
        sleeps=True,
        contexts=2 * GIB,
        asleep_residue=GIB,
    )
    resident = 10 * GIB + 2 * GIB + 2 * GIB + GPU_RESERVE_BYTES
    assert plan.peaks(80 * GIB) == (resident + 40 * GIB, resident + 5 * GIB + GIB)
    awake = MemoryPlan(**{**plan.__dict__, "sleeps": False})
    assert awake.peaks(80 * GIB)[1] == resident + 5 * GIB + 40 * GIB  # the graph pool is inside the share
    assert sum(plan.terms(80 * GIB).values()) == plan.peaks(80 * GIB)[1]


def test_paper_7b_memory_settings_per_gpu_size(tmp_path):
    """The fastest settings that fit (neither, checkpointing, sleep, both) at the 7B shape, on mocked GPU
    sizes: paper-7b's own (checkpointing on, vLLM awake) on 80 GB, neither on an H200 (141 GB), both on 48 GB,
    none on 40 GB (vLLM's half and the trainer's copy do not fit)."""
    from populora.doctor import model_sizes
    from populora.engine.memory import fastest_settings

    cfg = load_config(preset="paper-7b")
    folder = model_sizes(cfg, tmp_path).folder
    ckpt, sleep = "rl.activation_checkpointing", "model.vllm_sleep"
    assert fastest_settings(cfg, folder, 80 * 10**9) == {ckpt: True, sleep: False}
    assert (cfg.rl.activation_checkpointing, cfg.model.vllm_sleep) == (True, False)  # the preset: 80 GB's
    assert fastest_settings(cfg, folder, 141 * 10**9) == {ckpt: False, sleep: False}
    assert fastest_settings(cfg, folder, 48 * 10**9) == {ckpt: True, sleep: True}
    assert fastest_settings(cfg, folder, 40 * 10**9) is None
    check_plan(memory_plan(cfg, folder), 80 * 10**9)  # the preset as shipped fits an 80 GB GPU


def test_a_cuda_torch_on_an_old_driver_names_the_driver_and_both_fixes(monkeypatch):
    """'No GPU found' on a CUDA 13.0 torch with driver 535 says why: the driver, with both fixes."""
    import torch

    from populora.engine import cuda_driver
    from populora.engine.memory import cuda_problem

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(cuda_driver, "probe_driver", lambda: "535.104.05")
    msg = cuda_problem()
    assert "NVIDIA driver 535.104.05 (CUDA 12.2)" in msg and "driver >= 580" in msg
    assert "whl/cu129" in msg and "\n" not in msg
    monkeypatch.setattr(cuda_driver, "probe_driver", lambda: None)
    assert "no NVIDIA driver found" in cuda_problem()
