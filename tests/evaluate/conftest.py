"""Run folders for the evaluation tests: real PEFT adapters on the bundled tiny model, in the run-folder layout
(docs/run-folder.md) that `populora eval RUN_DIR` reads."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest


def make_run_folder(root: Path, members: dict[str, str]) -> Path:
    """A run folder whose newest checkpoint holds one random rank-4 LoRA adapter per member of ``members``
    ({id: role}), different for each member (seeded by its position), with an older checkpoint beside it."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from populora.engine import resolve_model

    torch.set_num_threads(1)
    base = AutoModelForCausalLM.from_pretrained(str(resolve_model("tiny")), dtype=torch.float32)
    (root / "config.yaml").write_text("model:\n  name: tiny\n")
    old = root / "checkpoints" / "step_000001"
    (old / "adapters").mkdir(parents=True)
    (old / "state.json").write_text("{}")
    ckpt = root / "checkpoints" / "step_000002"
    for i, mid in enumerate(members):
        torch.manual_seed(i + 1)
        cfg = LoraConfig(
            r=4,
            lora_alpha=8,
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
            init_lora_weights=False,
        )  # random A and B: the adapter really changes the model
        pm = get_peft_model(copy.deepcopy(base), cfg)
        with torch.no_grad():
            for name, p in pm.named_parameters():
                if "lora_B" in name:
                    p.mul_(20.0)
        pm.save_pretrained(ckpt / "adapters" / mid)
    state = [
        {"id": mid, "role": role, "mu": 26.0 - i, "sigma": 2.0}
        for i, (mid, role) in enumerate(members.items())
    ]
    (ckpt / "state.json").write_text(json.dumps({"step": 2, "members": state}))
    return root


@pytest.fixture(scope="session")
def run_folder():
    """`make_run_folder` for the tests (conftest modules are not importable by name)."""
    return make_run_folder
