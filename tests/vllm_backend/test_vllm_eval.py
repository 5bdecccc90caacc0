"""`populora eval --backend vllm` on two rank-4 PEFT adapters in one call (vLLM's smallest max_lora_rank above 4
is 8), against the hf merge path, and a second call that swaps the adapters' folders under the same member
names (LoRA ids are never reused, so vLLM cannot serve the previous call's adapter)."""

import copy
import json

import pytest

pytest.importorskip("vllm")

from typer.testing import CliRunner  # noqa: E402

from populora.cli import app  # noqa: E402
from populora.evaluate.data import load_benchmark  # noqa: E402
from populora.evaluate.generate import MergedHFGenerator, VLLMGenerator  # noqa: E402
from populora.evaluate.prompts import build_prompt  # noqa: E402
from populora.evaluate.targets import load_target  # noqa: E402


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A run folder whose checkpoint holds two random rank-4 PEFT adapters (T0, S0) on the tiny model."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from populora.engine import resolve_model

    torch.set_num_threads(1)
    base = AutoModelForCausalLM.from_pretrained(str(resolve_model("tiny")), dtype=torch.float32)
    root = tmp_path_factory.mktemp("run")
    (root / "config.yaml").write_text("model:\n  name: tiny\n")
    ckpt = root / "checkpoints" / "step_000001"
    for i, mid in enumerate(["T0", "S0"]):
        torch.manual_seed(i + 1)
        cfg = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
        pm = get_peft_model(copy.deepcopy(base), cfg)
        with torch.no_grad():
            for name, p in pm.named_parameters():
                if "lora_" in name:
                    p.copy_(torch.randn_like(p) * 0.3)
        pm.save_pretrained(ckpt / "adapters" / mid)
    members = [
        {"id": "T0", "role": "teacher", "mu": 26.0, "sigma": 2.0},
        {"id": "S0", "role": "student", "mu": 24.0, "sigma": 2.0},
    ]
    (ckpt / "state.json").write_text(json.dumps({"step": 1, "members": members}))
    return root


@pytest.fixture(scope="module")
def vllm_gen(run_dir):
    gen = VLLMGenerator(load_target(run_dir).base, device="cpu")
    yield gen
    gen.close()


def test_two_rank4_adapters_in_one_call_match_hf_and_ids_are_not_reused(run_dir, shared_data, vllm_gen):
    tgt = load_target(run_dir)
    items = load_benchmark("humaneval+", shared_data, limit=2) + load_benchmark("gsm8k", shared_data, limit=1)
    prompts = [build_prompt(it, "azr", vllm_gen.tokenizer) for it in items]
    adapters = {"base": None, **tgt.adapters()}
    v = vllm_gen.generate(adapters, prompts, max_new_tokens=16)
    assert vllm_gen._max_rank == 8  # rank 4 rounded up to a value vLLM accepts
    h = MergedHFGenerator(tgt.base, batch_size=4).generate(adapters, prompts, max_new_tokens=16)
    assert v == h
    assert v["T0"] != v["base"] and v["S0"] != v["T0"]  # the adapters are really applied
    swapped = {"T0": adapters["S0"], "S0": adapters["T0"]}  # same names, other folders: a new call
    w = vllm_gen.generate(swapped, prompts, max_new_tokens=16)
    assert w == {"T0": v["S0"], "S0": v["T0"]}
    assert vllm_gen.generate(adapters, prompts, max_new_tokens=0) == {
        m: [""] * len(prompts) for m in adapters
    }


def test_eval_cli_backend_vllm(run_dir, shared_data, monkeypatch):
    monkeypatch.setenv("POPULORA_NO_PROGRESS", "1")
    r = CliRunner().invoke(
        app,
        [
            "eval",
            str(run_dir),
            "--backend",
            "vllm",
            "--limit",
            "2",
            "--benchmarks",
            "humaneval+,gsm8k",
            "--max-new-tokens",
            "16",
            "--data-dir",
            str(shared_data),
        ],
    )
    assert r.exit_code == 0, r.output
    out = json.loads((run_dir / "eval" / "results.json").read_text())
    assert {(x["member"], x["benchmark"]) for x in out["results"]} == {
        (m, b) for m in ("base", "T0", "S0") for b in ("humaneval+", "gsm8k")
    }
    assert out["meta"]["backend"] == "vllm"
