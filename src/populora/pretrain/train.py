"""Train the tiny Qwen2-architecture model on the synthetic corpus and write a standard HF model folder.

`pretrain(cfg, out)` generates the corpus (seeded), trains the tokenizer on part of it, packs whole
examples into fixed-length rows (prompt tokens weighted by `prompt_loss_weight`, completions by 1), and
trains with AdamW and a warm-up + cosine schedule. The number of steps is either given (`steps`,
reproducible bit for bit on the same machine and torch build) or derived from a wall-clock budget
(`minutes`): the step time is measured over the first steps and fixed once, so the schedule is a normal
step-based one; the derived number is written to `pretrain_info.json`, and passing it back as `steps`
reproduces the run.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from populora.pretrain.corpus import MIX, Example, build_corpus
from populora.pretrain.programs import DEFAULT_LEVEL, DEFAULT_NAMES, MAX_STATEMENTS


@dataclass
class PretrainConfig:
    seed: int = 0
    # Model (Qwen2 architecture; tied embeddings keep the fp32 safetensors near 17 MB).
    hidden_size: int = 256
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 4
    intermediate_size: int = 688
    vocab_size: int = 4096
    max_positions: int = 2048
    # Data.
    n_examples: int = 30000
    tokenizer_examples: int = 6000
    val_examples: int = 200
    k_refs: tuple[int, int] = (1, 4)
    n_inputs: int = 10
    mix: dict[str, float] = field(default_factory=lambda: dict(MIX))
    names: str = DEFAULT_NAMES  # variable naming of the generated programs (programs.NAMES)
    max_statements: int = MAX_STATEMENTS  # the generator's difficulty knob (programs.sample_program)
    level: str = DEFAULT_LEVEL  # which statement kinds the generator uses (programs.LEVELS)
    # Graded levels only: the levels student examples draw from (None: `level`). Teachers keep `level`.
    student_level: str | None = None
    # code_o student answers start with an execution trace (pretrain/trace.py): the model learns to write
    # its working before the output block, one small step per line.
    trace: bool = False
    # The share of code_o answers that carry the trace when `trace` is on; the rest answer bare. Below 1 the
    # model writes the trace on some problems and not on others: a preference RL can change (docs/learning.md).
    trace_fraction: float = 1.0
    # Reduction-trace lines start with the expression as written (`r = n + m = 4 + 1 = 5`), not with its
    # names already replaced (`r = 4 + 1 = 5`): the value of each name is then written right after its turn.
    trace_names: bool = False
    # Graded levels: every code_f student answer starts with the trace of the gold program on the first pair the
    # student is shown, then the program (an experiment of sitting 7 that did not raise accuracy; off by default).
    code_f_trace: bool = False
    # Graded levels: planted misconceptions (pretrain/flaws.py, issue 49). Code_o student examples whose answer a
    # class's misreading changes, and the `flaws:*` mix drills, are answered as the misconceived reader would
    # in `flaw_rate` of them. Empty: the corpus of runs before the option, example for example.
    flaws: tuple[str, ...] = ()
    flaw_rate: float = 0.6
    # Optimisation.
    seq_len: int = 512
    batch_size: int = 8
    lr: float = 2e-3
    warmup_steps: int = 30
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    prompt_loss_weight: float = 0.3
    steps: int | None = None
    minutes: float = 48.0
    # "wsd" (warm-up, stable, then a linear decay over the last `decay_frac` of the steps) or "cosine".
    # With a wall-clock budget, wsd keeps the peak rate until (1 - decay_frac) of the budget has passed
    # and only then fixes the step count, so a run on a shared machine uses the time it gets whatever the
    # load; `decay_start` and `steps` are recorded, and passing both back reproduces the schedule.
    schedule: str = "wsd"
    decay_frac: float = 0.2
    decay_start: int | None = None
    threads: int = 2
    # bf16 autocast for the matmuls (weights, optimizer state and the saved model stay float32): about 1.8x
    # the tokens per second of float32 on this AVX-512-BF16 CPU.
    bf16: bool = True
    # "example": every packed example attends only to itself and starts at position 0, exactly as a prompt
    # does at inference (position ids restart per example; transformers turns that into a block-causal
    # mask). "row": the whole packed row is one causal sequence (the runs before 2026-12-01).
    attention: str = "example"
    # Continue from a model folder written by an earlier run (its tokenizer and weights; model-shape fields
    # above are then ignored). Use another --seed so the continuation sees new examples.
    init_from: str | None = None
    # Every this many minutes of training, write the model so far to `<out>/checkpoint` (a loadable model folder
    # with a `checkpoint.json` of its step): a run stopped by a crash or the end of a sitting loses at most this
    # much, and `--init-from <out>/checkpoint` continues it. 0 = off.
    save_every_minutes: float = 0.0
    # With `init_from`: insert this many identity layers (pretrain/grow.py) before training, so the continued
    # run has more depth and starts from exactly what the original model computes. 0 = keep its shape.
    grow_layers: int = 0


@dataclass
class PackedData:
    ids: list[list[int]]
    weights: list[list[float]]
    # Position of each token inside its own example (the padding tail counts as one more example).
    positions: list[list[int]]


def _encode(tok, examples: list[Example], cfg: PretrainConfig) -> list[tuple[list[int], list[float]]]:
    """Prompt and completion are tokenized separately, exactly as the engine sees them at inference."""
    prompts = tok([e.prompt for e in examples], add_special_tokens=False)["input_ids"]
    comps = tok([e.completion for e in examples], add_special_tokens=False)["input_ids"]
    out = []
    for p, c in zip(prompts, comps, strict=True):
        ids = p + c + [tok.eos_token_id]
        if len(ids) > cfg.seq_len:
            continue  # rare very long teacher prompts; dropping keeps every kept example whole
        out.append((ids, [cfg.prompt_loss_weight] * len(p) + [1.0] * (len(c) + 1)))
    return out


def _pack(encoded: list[tuple[list[int], list[float]]], seq_len: int, pad_id: int) -> PackedData:
    """First-fit packing of whole examples into rows of seq_len tokens (pad has weight 0)."""
    rows_ids: list[list[int]] = []
    rows_w: list[list[float]] = []
    rows_pos: list[list[int]] = []
    cur_ids: list[int] = []
    cur_w: list[float] = []
    cur_pos: list[int] = []

    def close_row() -> None:
        n_pad = seq_len - len(cur_ids)
        rows_ids.append(cur_ids + [pad_id] * n_pad)
        rows_w.append(cur_w + [0.0] * n_pad)
        rows_pos.append(cur_pos + list(range(n_pad)))

    for ids, w in encoded:
        if len(cur_ids) + len(ids) > seq_len:
            close_row()
            cur_ids, cur_w, cur_pos = [], [], []
        cur_ids += ids
        cur_w += w
        cur_pos += list(range(len(ids)))
    if cur_ids:
        close_row()
    return PackedData(rows_ids, rows_w, rows_pos)


def model_config(cfg: PretrainConfig, tok):
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        max_position_embeddings=cfg.max_positions,
        tie_word_embeddings=True,
        rope_theta=10000.0,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        use_cache=True,
    )


def _weighted_loss(model, ids, weights, bf16: bool = False, positions=None):
    """Weighted next-token loss of packed rows. With `positions` (restarting at 0 per example), no attention
    mask and no cache, transformers builds a block-causal mask: no token sees another example. (With a
    cache, which the model makes by default, it silently skips that and the row is one sequence.)"""
    import torch
    import torch.nn.functional as F

    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = model(input_ids=ids, position_ids=positions, use_cache=False).logits[:, :-1]
    logits = logits.float()  # the loss itself in float32
    target = ids[:, 1:]
    w = weights[:, 1:]
    nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), reduction="none")
    nll = nll.view_as(w)
    return (nll * w).sum() / w.sum().clamp_min(1.0), nll, w


def _save_model(model, tok, folder: Path) -> None:
    """Write `model` and `tok` as a standard HF folder (greedy generation config), as the engine loads it."""
    from transformers import GenerationConfig

    folder.mkdir(parents=True, exist_ok=True)
    model.generation_config = GenerationConfig(
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        do_sample=False,
    )
    model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)


def save_checkpoint(model, tok, out: Path, info: dict) -> Path:
    """Write the model so far to `<out>/checkpoint` (model folder + checkpoint.json), replacing the previous one
    only once the new one is complete, so a crash mid-write leaves the older checkpoint whole."""
    final = Path(out) / "checkpoint"
    tmp = Path(out) / "checkpoint.partial"
    if tmp.exists():
        shutil.rmtree(tmp)
    _save_model(model, tok, tmp)
    (tmp / "checkpoint.json").write_text(json.dumps(info, indent=2) + "\n")
    old = Path(out) / "checkpoint.old"
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    if old.exists():
        shutil.rmtree(old)
    return final


def pretrain(cfg: PretrainConfig, out: Path, progress: bool = True, renderer=None) -> dict:
    """Build corpus + tokenizer + model, train, and write the model folder to `out`. Returns the info dict."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
    from transformers import Qwen2ForCausalLM

    from populora.pretrain.render import get_renderer
    from populora.pretrain.tokenizer import train_tokenizer

    if cfg.attention not in ("example", "row"):  # before the corpus is built, not minutes later
        raise ValueError(f"attention must be example or row, got {cfg.attention!r}")
    t0 = time.time()
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    renderer = renderer or get_renderer()
    kw = dict(
        k_refs=cfg.k_refs,
        n_inputs=cfg.n_inputs,
        mix=cfg.mix,
        names=cfg.names,
        max_statements=cfg.max_statements,
        level=cfg.level,
        trace=cfg.trace,
        trace_fraction=cfg.trace_fraction,
        student_level=cfg.student_level,
        trace_names=cfg.trace_names,
        code_f_trace=cfg.code_f_trace,
        flaws=tuple(cfg.flaws),
        flaw_rate=cfg.flaw_rate,
    )
    train_ex = build_corpus(cfg.seed, cfg.n_examples, renderer, **kw)
    # A different stream for validation; a few collisions with training programs are possible and harmless.
    val_ex = build_corpus(cfg.seed + 1_000_003, cfg.val_examples, renderer, **kw)
    t_corpus = time.time() - t0

    if cfg.init_from:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(cfg.init_from)
    else:
        tok = train_tokenizer(
            (e.prompt + e.completion for e in train_ex[: cfg.tokenizer_examples]), vocab_size=cfg.vocab_size
        )
    enc = _encode(tok, train_ex, cfg)
    val_enc = _encode(tok, val_ex, cfg)
    n_tokens = sum(len(ids) for ids, _ in enc)
    rng = random.Random(cfg.seed)
    rng.shuffle(enc)
    data = _pack(enc, cfg.seq_len, tok.pad_token_id)
    val = _pack(val_enc, cfg.seq_len, tok.pad_token_id)
    per_example = cfg.attention == "example"
    ids_all = torch.tensor(data.ids)
    w_all = torch.tensor(data.weights)
    pos_all = torch.tensor(data.positions) if per_example else None

    if cfg.init_from:
        model = Qwen2ForCausalLM.from_pretrained(cfg.init_from, dtype=torch.float32)
        prev = Path(cfg.init_from) / "pretrain_info.json"
        ckpt = (
            Path(cfg.init_from) / "checkpoint.json"
        )  # a mid-run checkpoint (save_checkpoint) has no info yet
        if prev.exists():
            history = json.loads(prev.read_text()).get("history", []) + [json.loads(prev.read_text())]
        elif ckpt.exists():
            history = [{"checkpoint": json.loads(ckpt.read_text())}]
        else:
            history = []
        if cfg.grow_layers:
            from populora.pretrain.grow import grow_depth

            model = grow_depth(model, cfg.grow_layers)
    else:
        if cfg.grow_layers:
            raise ValueError("grow_layers needs init_from: only a pretrained model is grown")
        model = Qwen2ForCausalLM(model_config(cfg, tok))
        history = []
    model.train()
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr,
        betas=(0.9, 0.95),
    )

    if cfg.schedule not in ("wsd", "cosine"):
        raise ValueError(f"schedule must be wsd or cosine, got {cfg.schedule!r}")
    total = cfg.steps or 10**9  # fixed later when running on a time budget
    decay_start = cfg.decay_start
    if cfg.steps and cfg.schedule == "wsd" and decay_start is None:
        decay_start = max(cfg.warmup_steps, int(cfg.steps * (1 - cfg.decay_frac)))
    measure_at = 6
    n_rows = ids_all.shape[0]
    gen = torch.Generator().manual_seed(cfg.seed)
    order = torch.randperm(n_rows, generator=gen)
    pos = 0
    losses: list[float] = []
    step = 0
    t_train = time.time()
    last_save = t_train
    deadline = t_train + 1.3 * cfg.minutes * 60 if not cfg.steps else float("inf")

    def lr_at(s: int) -> float:
        if s < cfg.warmup_steps:
            return cfg.lr * (s + 1) / cfg.warmup_steps
        if cfg.schedule == "wsd":
            if decay_start is None or s < decay_start:
                return cfg.lr
            frac = min(1.0, (s - decay_start) / max(1, total - decay_start))
            return cfg.lr * (1 - (1 - cfg.min_lr_ratio) * frac)
        frac = min(1.0, (s - cfg.warmup_steps) / max(1, total - cfg.warmup_steps))
        return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))

    columns = [
        TextColumn("[bold]pretrain-tiny"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} steps"),
        TextColumn("loss {task.fields[loss]}"),
        TextColumn("{task.fields[tps]} tok/s"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    ]
    with Progress(*columns, disable=not progress, transient=False) as bar:
        task = bar.add_task("train", total=cfg.steps or None, loss="-", tps="-")
        while step < total and time.time() < deadline:
            if pos + cfg.batch_size > n_rows:
                order = torch.randperm(n_rows, generator=gen)
                pos = 0
            idx = order[pos : pos + cfg.batch_size]
            pos += cfg.batch_size
            for g in opt.param_groups:
                g["lr"] = lr_at(step)
            loss, _, _ = _weighted_loss(
                model, ids_all[idx], w_all[idx], cfg.bf16, None if pos_all is None else pos_all[idx]
            )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            step += 1
            losses.append(loss.item())
            if (
                cfg.schedule == "wsd"
                and not cfg.steps
                and decay_start is None
                and time.time() - t_train >= (1 - cfg.decay_frac) * cfg.minutes * 60
            ):
                decay_start = max(step, cfg.warmup_steps)
                total = decay_start + max(1, round(decay_start * cfg.decay_frac / (1 - cfg.decay_frac)))
                bar.update(task, total=total)
            if cfg.schedule == "cosine" and step == measure_at and not cfg.steps:
                per_step = (time.time() - t_train) / step
                total = max(measure_at + 1, int(cfg.minutes * 60 / per_step))
                bar.update(task, total=total)
            elapsed = time.time() - t_train
            tps = step * cfg.batch_size * cfg.seq_len / max(elapsed, 1e-9)
            recent = sum(losses[-20:]) / len(losses[-20:])
            bar.update(task, completed=step, loss=f"{recent:.3f}", tps=f"{tps:,.0f}")
            if cfg.save_every_minutes > 0 and time.time() - last_save >= cfg.save_every_minutes * 60:
                model.eval()
                save_checkpoint(
                    model,
                    tok,
                    Path(out),
                    {
                        "step": step,
                        "tokens_seen": step * cfg.batch_size * cfg.seq_len,
                        "train_loss": round(recent, 4),
                        "config": asdict(cfg),
                    },
                )
                model.train()
                last_save = time.time()
            if progress and not bar.console.is_terminal and (step % 25 == 0 or step == 1):
                # Logged to a file: the live bar is not drawn, so print a line now and then.
                bar.console.print(
                    f"step {step}/{total if total < 10**9 else '?'} loss {recent:.3f} "
                    f"{tps:,.0f} tok/s {elapsed:.0f}s"
                )

    model.eval()
    with torch.no_grad():
        vids, vw = torch.tensor(val.ids), torch.tensor(val.weights)
        vpos = torch.tensor(val.positions) if per_example else None
        num = den = 0.0
        for i in range(0, vids.shape[0], cfg.batch_size):
            sl = slice(i, i + cfg.batch_size)
            _, nll, w = _weighted_loss(model, vids[sl], vw[sl], positions=None if vpos is None else vpos[sl])
            mask = (w == 1.0).float()  # completion tokens only: what the model must produce
            num += (nll * mask).sum().item()
            den += mask.sum().item()
    val_loss = num / max(den, 1.0)

    out = Path(out)
    _save_model(model, tok, out)
    info = {
        "seed": cfg.seed,
        "renderer": getattr(renderer, "name", type(renderer).__name__),
        "corpus_examples": len(train_ex),
        "corpus_tokens": n_tokens,
        "packed_rows": n_rows,
        "steps": step,
        "tokens_seen": step * cfg.batch_size * cfg.seq_len,
        "final_train_loss": round(sum(losses[-20:]) / max(1, len(losses[-20:])), 4),
        "val_completion_loss": round(val_loss, 4),
        "parameters": sum(p.numel() for p in model.parameters()),
        "train_seconds": round(time.time() - t_train, 1),
        "corpus_seconds": round(t_corpus, 1),
        "config": {k: v for k, v in asdict(cfg).items()},
        # Earlier runs this one continued from (each with its own config), oldest first.
        "history": [{k: v for k, v in h.items() if k != "history"} for h in history],
    }
    info["config"]["steps"] = step  # pass this back (with the same seed) to reproduce the run
    info["config"]["decay_start"] = decay_start
    (out / "pretrain_info.json").write_text(json.dumps(info, indent=2) + "\n")
    return info
