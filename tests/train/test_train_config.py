"""Typed config: presets, --set overrides, validation messages, YAML round trip."""

import pydantic
import pytest
import yaml

from populora import names
from populora.config import (
    Config,
    ConfigError,
    all_keys,
    field_docs,
    from_dict,
    load_config,
    preset_names,
    resume_config,
    to_dict,
    to_yaml,
)
from populora.engine.memory import check_memory

CONTRACT_KEYS = [
    "train.steps",
    "train.checkpoint_every",
    "train.seed",
    "population.mode",
    "population.teachers",
    "population.students",
    "evolution.every",
    "evolution.gamma",
    "evolution.operators",
    "rl.lr",
    "rl.rollouts",
    "model.name",
    "lora.rank",
    "lora.alpha",
]


def test_contract_keys_exist_and_every_field_is_documented():
    keys = all_keys()
    for k in CONTRACT_KEYS:
        assert k in keys
    docs = field_docs()
    assert set(docs) == set(keys)
    assert all(len(d) > 10 for d in docs.values()), [k for k, d in docs.items() if len(d) <= 10]


def test_every_preset_loads_and_paper_values():
    names = preset_names()
    assert {"tiny", "smol", "paper-7b", "ablation-single", "ablation-1t1s"} <= set(names)
    for name in names:
        load_config(name)
    p = load_config("paper-7b")
    assert (p.lora.rank, p.lora.alpha, p.lora.targets) == (32, 64.0, ["q_proj", "k_proj", "v_proj", "o_proj"])
    assert (p.population.teachers, p.population.students, p.train.steps) == (4, 4, 200)
    assert (p.rl.lr, p.rl.rollouts, p.rl.temperature, p.tasks.prompts) == (5e-5, 8, 1.0, 72)
    assert (p.evolution.every, p.evolution.gamma, p.tasks.references) == (10, 0.25, 6)
    assert load_config("ablation-single").population.mode == "single"
    assert load_config("ablation-single").lora.rank == 32  # inherited through base: paper-7b


def test_tiny_is_the_2t2s_cpu_default():
    c = load_config()
    assert (c.population.teachers, c.population.students, c.model.name, c.model.device) == (
        2,
        2,
        "tiny",
        "cpu",
    )
    assert c.n_slots == 4 and c.effective_whiten_scope == "batch"
    assert c.evolution.every <= c.train.steps  # the demo shows an evolution event


def test_overrides_are_typed():
    c = load_config(
        "tiny",
        [
            "rl.lr=5e-5",
            "evolution.operators=M1,X2",
            "population.teachers=3",
            "population.balanced=false",
            "evolution.gamma=0.5",
            "lora.alpha=8",
            "lora.targets=[q_proj, v_proj]",
            "population.mode=single",
        ],
    )
    assert c.rl.lr == 5e-5 and isinstance(c.rl.lr, float)
    assert c.evolution.operators == ["M1", "X2"] and c.population.teachers == 3
    assert c.population.balanced is False and c.lora.alpha == 8.0 and c.lora.targets == ["q_proj", "v_proj"]
    assert c.n_slots == 1 and c.effective_whiten_scope == "batch"  # the same scope as the population
    assert c.rl.loss_norm == "role"


@pytest.mark.parametrize(
    "override,needle",
    [
        ("lora.rank=0", "lora.rank: must be >= 1"),
        ("evolution.gamma=1", "evolution.gamma: must be in (0, 1)"),
        ("evolution.gamma=1.5", "evolution.gamma"),
        ("evolution.operators=M1,Q7", "evolution.operators: unknown operator 'Q7'"),
        ("evolution.operators=m1", "did you mean 'M1'"),
        ("rl.lrr=1", "unknown config key 'rl.lrr'; did you mean 'rl.lr'"),
        ("steps=3", "did you mean 'train.steps'"),
        ("population.mode=singel", "did you mean 'single'"),
        ("train.steps=2.5", "train.steps: expected an integer"),
        ("rl.lr=fast", "rl.lr: expected a number"),
        ("rl.temperature=0", "rl.temperature: must be > 0"),
        ("model.name=./no/such/model", "model.name: path './no/such/model' does not exist"),
        ("population.teachers=0", "population.teachers: must be >= 1"),
        ("train.steps", "expected key=value"),
    ],
)
def test_bad_values_give_one_line_naming_the_field(override, needle):
    with pytest.raises(ConfigError) as err:
        load_config("tiny", [override])
    msg = str(err.value)
    assert needle in msg and "\n" not in msg


def test_unknown_preset():
    with pytest.raises(ConfigError, match="unknown preset 'tinny'; did you mean 'tiny'"):
        load_config("tinny")


def test_more_slots_than_memory_allows():
    c = load_config("tiny", ["population.teachers=8", "population.students=8"])
    check_memory(c, base_bytes=2**30, slot_bytes=2**20, available_bytes=4 * 2**30)  # fits
    with pytest.raises(
        ConfigError, match=r"16 adapter slots need ~2.0 GiB but only 1.5 GiB.*at most 8 slots"
    ):
        check_memory(c, base_bytes=2**30, slot_bytes=2**26, available_bytes=3 * 2**29)


def test_yaml_round_trip_and_preset_file(tmp_path):
    c = load_config("tiny", ["rl.lr=3e-4", "population.mode=single", "evolution.operators=M4"])
    text = to_yaml(c)
    assert "# AdamW learning rate" in text
    back = from_dict(yaml.safe_load(text))
    assert to_dict(back) == to_dict(c)
    f = tmp_path / "mine.yaml"
    f.write_text(text)
    assert to_dict(load_config(str(f))) == to_dict(c)


def test_defaults_validate():
    from populora.config import validate

    assert validate(Config()) == Config()
    assert isinstance(Config(), pydantic.BaseModel)


def test_log_sinks_are_config_keys_and_reach_the_run_folder(tmp_path):
    from populora.config import load_config
    from populora.train.run_folder import RunFolder

    cfg = load_config("tiny", ["log.tensorboard=true"])
    assert cfg.log.tensorboard is True and cfg.log.wandb is False
    run = RunFolder(tmp_path, tensorboard=cfg.log.tensorboard)
    run.metric({"step": 1, "members": {"T0": {"reward": 0.5}}})
    run.logger.close()
    assert (tmp_path / "metrics.jsonl").exists()
    assert any((tmp_path / "tensorboard").iterdir())


def test_operator_choices_are_the_registry():
    from populora.operators import LIVE_OPERATORS, REGISTRY

    assert names.OPERATORS == tuple(REGISTRY)  # the config accepts exactly the registered operators
    assert LIVE_OPERATORS == names.LIVE_OPERATORS and set(LIVE_OPERATORS) <= set(REGISTRY)
    assert Config().evolution.operators == list(names.LIVE_OPERATORS)
    for op in REGISTRY:
        load_config("tiny", [f"evolution.operators={op}"])
    with pytest.raises(ConfigError, match="unknown operator 'M7'"):
        load_config("tiny", ["evolution.operators=M7"])


def test_resume_config_changes_only_the_resumable_keys():
    saved = to_dict(load_config("tiny", ["train.steps=4", "rl.lr=3e-4"]))
    cfg = resume_config(saved, ["train.steps=9", "train.threads=1"])
    assert (cfg.train.steps, cfg.train.threads, cfg.rl.lr) == (9, 1, 3e-4)
    assert to_dict(resume_config(saved)) == saved
    with pytest.raises(ConfigError, match=r"--set lora.rank: cannot change on --resume \(only train.steps"):
        resume_config(saved, ["lora.rank=4"])
    with pytest.raises(ConfigError, match="train.steps: must be >= 1"):
        resume_config(saved, ["train.steps=0"])


@pytest.mark.parametrize(
    "section, key, value, message",
    [
        ("train", "steps", 0, "train.steps: must be >= 1, got 0; set e.g. --set train.steps=10."),
        (
            "model",
            "backend",
            "vlm",
            "model.backend: 'vlm' is not allowed (did you mean 'vllm'?); use one of hf, vllm.",
        ),
        ("rl", "lr", "abc", "rl.lr: expected a number, got 'abc'; set it like `--set rl.lr=...`."),
        ("train", "setps", 1, "unknown config key 'train.setps'; did you mean 'train.steps'?"),
    ],
)
def test_an_assignment_in_code_is_refused_with_the_set_message(section, key, value, message):
    """Python users who change a loaded config in place get the CLI's one line, not pydantic's report."""
    cfg = load_config("tiny", [])
    with pytest.raises(ConfigError) as err:
        setattr(getattr(cfg, section), key, value)
    assert str(err.value) == message
    with pytest.raises(ConfigError) as cli:
        load_config("tiny", [f"{section}.{key}={value}"])
    assert str(cli.value) == message  # the same words as --set
    cfg.train.steps = 7  # a good value is taken
    assert cfg.train.steps == 7


def test_every_section_knows_its_key_in_the_config():
    """An assignment's error names `section.key`; the section finds its name from its class name."""
    for name, info in Config.model_fields.items():
        assert info.annotation.section_key() == name
