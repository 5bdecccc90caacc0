"""`Config`, the whole run config: its sections, the checks between sections, and the checks of what it names
on this machine (the model folder, the template folder, the installed task families)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, model_validator

from populora.config.errors import ConfigError, show
from populora.config.sections import (
    MAX_SLOTS,
    DiagnosticsConfig,
    DistConfig,
    EvalConfig,
    EvolutionConfig,
    HofConfig,
    LogConfig,
    LoRAConfig,
    ModelConfig,
    PopulationConfig,
    RatingsConfig,
    RLConfig,
    SandboxConfig,
    TasksConfig,
    TrainConfig,
    _require,
)
from populora.names import TEMPLATE_NAMES
from populora.paths import NAMED_MODELS


class Config(BaseModel):
    """A run's config. `Config.model_validate(data, context={"check": False})` skips the checks of this
    machine (`check_machine`); `model_json_schema()` is the schema of config.yaml."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_attribute_docstrings=True)

    train: TrainConfig = Field(default_factory=TrainConfig)
    """Length, checkpoints, seed and threads."""
    model: ModelConfig = Field(default_factory=ModelConfig)
    """The frozen base model and where it runs."""
    lora: LoRAConfig = Field(default_factory=LoRAConfig)
    """The adapters' shape."""
    population: PopulationConfig = Field(default_factory=PopulationConfig)
    """Who plays: population sizes, mode and matchmaking."""
    ratings: RatingsConfig = Field(default_factory=RatingsConfig)
    """TrueSkill ratings of the members."""
    evolution: EvolutionConfig = Field(default_factory=EvolutionConfig)
    """The PBT replacement step."""
    rl: RLConfig = Field(default_factory=RLConfig)
    """Optimiser, rollouts and advantages."""
    tasks: TasksConfig = Field(default_factory=TasksConfig)
    """What teachers propose and how long answers may be."""
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    """The verifier's worker pool and limits."""
    log: LogConfig = Field(default_factory=LogConfig)
    """Metric sinks beyond metrics.jsonl (always written)."""
    diagnostics: DiagnosticsConfig = Field(default_factory=DiagnosticsConfig)
    """Measurements taken during training that do not change it (the fixed probe)."""
    dist: DistConfig = Field(default_factory=DistConfig)
    """Multi-GPU / multi-node data parallelism on Ray."""
    eval: EvalConfig = Field(default_factory=EvalConfig)
    """`populora eval`'s generation budgets (large enough not to truncate long answers)."""
    hof: HofConfig = Field(default_factory=HofConfig)
    """The hall of fame: unrated games against frozen references (off by default)."""

    @property
    def n_teachers(self) -> int:
        return 0 if self.population.mode == "single" else self.population.teachers

    @property
    def n_students(self) -> int:
        return 0 if self.population.mode == "single" else self.population.students

    @property
    def n_slots(self) -> int:
        """Adapter slots the engine needs: one per member (1 in single mode), then the hall's (`hof.slots`)."""
        single = self.population.mode == "single"
        members = 1 if single else self.population.teachers + self.population.students
        return members + self.hof.slots(single)

    @property
    def effective_whiten_scope(self) -> str:
        """The whitening scope, the same in both modes so the baseline differs only in agent count."""
        return "batch" if self.rl.whiten_scope == "auto" else self.rl.whiten_scope

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> Config:
        """The checks between sections; then, unless the context says `check: False`, `check_machine`."""
        r, steps = self.rl, self.train.steps
        _require(
            r.warmup_steps == 0 or r.warmup_steps < steps,
            f"rl.warmup_steps: must be >= 0 and below train.steps ({steps}), got {r.warmup_steps}; "
            "the run would never reach rl.lr.",
        )
        hall = self.hof.slots(self.population.mode == "single")
        _require(
            self.n_slots <= MAX_SLOTS,
            f"population: {self.n_slots - hall} members + {hall} hall-of-fame slots need {self.n_slots} adapter "
            f"slots, more than the {MAX_SLOTS} a run holds (each with its AdamW state, ~0.3 GiB at 7B rank 32); "
            "lower population.teachers / population.students or hof.size.",
        )
        if (info.context or {}).get("check", True):
            check_machine(self)
        return self


def check_machine(cfg: Config) -> None:
    """What the config names on this machine: the task families and their task types, the template folder,
    the model folder (and `model.revision` only with a hub id); ConfigError with the fix."""
    tk, model = cfg.tasks, cfg.model
    _check_families(tk.families, tk.types)
    _require(
        tk.template in TEMPLATE_NAMES or Path(tk.template).expanduser().is_dir(),
        f"tasks.template: {show(tk.template)} is not one of {', '.join(TEMPLATE_NAMES)} or an existing template "
        "folder.",
    )
    _require(
        not model.revision or (model.name not in NAMED_MODELS and not Path(model.name).expanduser().exists()),
        f"model.revision: applies to hub ids only, but model.name={show(model.name)} is a bundled name or "
        "a local folder; set model.revision=''.",
    )
    check_model_path(model.name)


def _check_families(families: list[str], types: list[str]) -> None:
    """tasks.families names installed families and tasks.types only their task types."""
    from populora.tasks import registry

    try:
        allowed = registry.task_types(families)
    except registry.FamilyError as err:
        raise ConfigError(f"tasks.families: {show(str(err))}") from None
    for tt in types:
        _require(
            tt in allowed,
            f"tasks.types: {show(tt)} is not a task type of tasks.families ({show(', '.join(families))}: "
            f"{', '.join(allowed)}); set tasks.types to some of those, or add its family to tasks.families.",
        )


def check_model_path(name: str) -> None:
    """Fail early, with the fix, when `model.name` looks like a local path that does not exist."""
    if name in NAMED_MODELS:
        return
    path = Path(name).expanduser()
    if path.exists():
        if not (path / "config.json").exists():
            raise ConfigError(
                f"model.name: {show(name)} has no config.json; point it at a Hugging Face model folder."
            )
        return
    looks_like_hub_id = (
        name.count("/") == 1 and not name.startswith((".", "/", "~")) and not name.endswith("/")
    )
    if not looks_like_hub_id:
        raise ConfigError(
            f"model.name: path {show(name)} does not exist; use 'tiny', 'smol', an existing model folder "
            "or a hub id like Qwen/Qwen2.5-Coder-7B."
        )
