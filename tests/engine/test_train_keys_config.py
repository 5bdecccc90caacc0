"""The training keys as config (issue 33 item 6): validation errors, which may change on resume, the
wiring into the engine a run builds, the per-step learning rate the trainer sets, and model.revision /
model.trust_remote_code reaching the loaders."""

from __future__ import annotations

import json

import pytest
import torch

from populora.config import ConfigError, load_config, resume_config, to_dict, to_yaml
from populora.engine import EngineError, TrainBatch, TrainRow, build
from populora.engine.models import load_model_and_tokenizer, resolve_model
from populora.engine.testing import random_model
from populora.train.setup import build_engine
from populora.train.trainer import Trainer


@pytest.mark.parametrize(
    "override, words",
    [
        ("lora.dropout=1.0", "lora.dropout: must be in [0, 1)"),
        ("rl.micro_batch_tokens=-1", "rl.micro_batch_tokens: must be >= 0"),
        ("rl.warmup_steps=-2", "rl.warmup_steps"),
        ("rl.lr_schedule=cosin", "did you mean 'cosine'"),
        ("model.revision=main", "model.revision: applies to hub ids only"),
    ],
)
def test_bad_values_are_one_line_errors(override, words):
    with pytest.raises(ConfigError, match=None) as err:
        load_config("tiny", [override])
    assert words in str(err.value) and "\n" not in str(err.value)


def test_warmup_must_end_before_the_run_does():
    with pytest.raises(ConfigError, match="below train.steps"):
        load_config("tiny", ["train.steps=5", "rl.warmup_steps=5"])
    assert load_config("tiny", ["train.steps=5", "rl.warmup_steps=4"]).rl.warmup_steps == 4


def test_memory_keys_may_change_on_resume_the_schedule_may_not():
    saved = to_dict(load_config("tiny", ["rl.micro_batch_tokens=4096"]))
    cfg = resume_config(saved, ["rl.micro_batch_tokens=512", "rl.activation_checkpointing=true"])
    assert cfg.rl.micro_batch_tokens == 512 and cfg.rl.activation_checkpointing is True
    for key in ("rl.lr_schedule=cosine", "rl.warmup_steps=2", "lora.dropout=0.1"):
        with pytest.raises(ConfigError, match="cannot change on --resume"):
            resume_config(saved, [key])
    # vLLM's memory too (issue 32), and the resume says what changed
    from populora.train.resume import changed_settings

    sets = ["model.vllm_gpu_memory_utilization=0.3", "model.vllm_sleep=false", "rl.micro_batch_tokens=512"]
    cfg = resume_config(saved, sets)
    assert cfg.model.vllm_gpu_memory_utilization == 0.3 and cfg.model.vllm_sleep is False
    line = changed_settings(saved, cfg)
    assert line.startswith("changed on resume: ") and "\n" not in line
    assert (
        "rl.micro_batch_tokens 4096 -> 512" in line and "model.vllm_gpu_memory_utilization 0.5 -> 0.3" in line
    )
    assert "model.vllm_sleep True -> False" in line and "train.steps" not in line
    assert changed_settings(saved, resume_config(saved, [])) is None


def test_keys_are_recorded_in_config_yaml():
    text = to_yaml(load_config("tiny", ["rl.lr_schedule=linear", "lora.dropout=0.05"]))
    for line in (
        "lr_schedule: linear",
        "warmup_steps: 0",
        "micro_batch_tokens: 4096",
        "dropout: 0.05",
        "activation_checkpointing: false",
        "revision: ''",
        "trust_remote_code: false",
    ):
        assert line in text


def test_a_run_builds_its_engine_with_the_keys():
    cfg = load_config(
        "tiny",
        [
            "rl.micro_batch_tokens=0",
            "rl.activation_checkpointing=true",
            "lora.dropout=0.1",
            "model.device=cpu",
        ],
    )
    eng = build_engine(cfg)
    assert eng.micro_batch_tokens == 0 and eng.lora_dropout == 0.1 and eng.activation_checkpointing
    layer = eng._decoder.layers[0]
    assert "forward" in vars(layer)  # the checkpointing wrapper sits on every decoder layer
    plain = build_engine(load_config("tiny", ["model.device=cpu"]))
    assert (
        plain.micro_batch_tokens == 4096 and plain.lora_dropout == 0.0 and not plain.activation_checkpointing
    )
    assert "forward" not in vars(plain._decoder.layers[0])


def _trainer(tmp_path, overrides):
    model, tok = random_model(seed=0)
    cfg = load_config("tiny", ["sandbox.workers=1", "train.steps=10", *overrides])
    engine = build(model=model, tokenizer=tok, n_slots=cfg.n_slots, rank=4, alpha=8, lr=cfg.rl.lr)
    return Trainer(cfg, tmp_path / "run", engine=engine, quiet=True)


def test_the_trainer_sets_every_adapter_to_the_scheduled_rate(tmp_path):
    tr = _trainer(tmp_path, ["rl.lr=1e-3", "rl.lr_schedule=linear", "rl.warmup_steps=2"])
    slots = range(tr.cfg.n_slots)
    assert tr.schedule_lr(1) == pytest.approx(5e-4)
    assert [tr.engine.get_lr(s) for s in slots] == pytest.approx([5e-4] * len(slots))
    assert tr.schedule_lr(6) == pytest.approx(1e-3 * (1 - 3 / 8))
    # a child born at evolution (fresh optimizer state) keeps, and then follows, the run's rate
    tr.engine.set_adapter(0, tr.engine.get_adapter(1), reset_optimizer=True)
    assert tr.engine.get_lr(0) == pytest.approx(1e-3 * (1 - 3 / 8))
    tr.schedule_lr(7)
    assert tr.engine.get_lr(0) == tr.engine.get_lr(1) == pytest.approx(1e-3 * (1 - 4 / 8))
    # a resumed run (a new trainer, fresh engine) sets the same rate for the same step: no state
    assert _trainer(tmp_path, ["rl.lr=1e-3", "rl.lr_schedule=linear", "rl.warmup_steps=2"]).schedule_lr(
        7
    ) == (tr.engine.get_lr(1))


def test_a_constant_schedule_leaves_the_engine_rates_alone(tmp_path):
    tr = _trainer(tmp_path, ["rl.lr=1e-3"])
    tr.engine.set_lr(0, 7e-4)  # e.g. a caller's own per-slot rate
    assert tr.schedule_lr(3) == pytest.approx(1e-3)
    assert tr.engine.get_lr(0) == pytest.approx(7e-4)


def test_revision_is_for_hub_ids_and_named_when_the_model_is_missing(monkeypatch):
    with pytest.raises(EngineError, match="applies to hub ids only"):
        resolve_model("tiny", revision="v1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(EngineError) as err:
        resolve_model("populora-test/no-such-model", revision="v1.2")
    assert "at revision 'v1.2'" in str(err.value) and "--revision v1.2" in str(err.value)


CUSTOM = """
from transformers import Qwen2Config, Qwen2ForCausalLM


class PopuConfig(Qwen2Config):
    model_type = "popu_custom"


class PopuForCausalLM(Qwen2ForCausalLM):
    config_class = PopuConfig
"""


def test_trust_remote_code_reaches_from_pretrained(tmp_path, monkeypatch):
    """A model folder whose architecture lives in its own Python file loads only when trusted."""
    import transformers.dynamic_module_utils as dmu

    monkeypatch.setattr(dmu, "HF_MODULES_CACHE", str(tmp_path / "modules"))  # not the user's cache
    model, tok = random_model(seed=0)
    folder = tmp_path / "custom"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    (folder / "popu_custom.py").write_text(CUSTOM)
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(
        model_type="popu_custom",
        architectures=["PopuForCausalLM"],
        auto_map={
            "AutoConfig": "popu_custom.PopuConfig",
            "AutoModelForCausalLM": "popu_custom.PopuForCausalLM",
        },
    )
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(EngineError, match="set model.trust_remote_code=true"):
        load_model_and_tokenizer(folder)  # a clear error, and no question on the terminal
    net, _, _ = load_model_and_tokenizer(folder, trust_remote_code=True)
    assert type(net).__name__ == "PopuForCausalLM"
    eng = build(str(folder), n_slots=1, rank=2, alpha=4, trust_remote_code=True)
    assert type(eng.model).__name__ == "PopuForCausalLM"
    lp = eng.logprobs(TrainBatch([TrainRow(slot=0, prompt_ids=[3, 4], response_ids=[5, 6], advantages=1.0)]))
    assert len(lp[0]) == 2 and all(torch.isfinite(torch.tensor(lp[0])))
