"""Phases 2-5 of a step on real parts (sandbox, tasks, engine with a tiny random model, operators), with the
teacher and student texts written by hand so the rewards, advantages, ratings and metrics are known numbers.
Each test builds its own trainer (a fresh population, buffers and engine), so the tests run in any order."""

import math
import random

import pytest
import torch

from populora import tasks
from populora.config import load_config
from populora.engine import Generation, build
from populora.engine.memory import estimate_memory
from populora.engine.testing import random_model
from populora.names import PHASES
from populora.rl.advantages import reinforce_pp_baseline
from populora.train.progress import summary_line
from populora.train.records import ProposalTrace, metrics_record, problem_records
from populora.train.trainer import Trainer, task_schedule

PROGRAM = "def f(x):\n    return x * 3"


def _gen(engine, slot: int, prompt: str, text: str) -> Generation:
    ids = engine.tokenizer(text, add_special_tokens=False)["input_ids"]
    return Generation(
        token_ids=ids,
        text=text,
        logprobs=[-1.0] * len(ids),
        finish_reason="stop",
        prompt_ids=engine.encode(prompt),
        slot=slot,
    )


def set_up_trainer(tmp_path, overrides=(), model_and_tokenizer=None) -> Trainer:
    """A set-up tiny-preset trainer on a random model (or the given one) with `overrides` on top."""
    model, tok = model_and_tokenizer or random_model(seed=0)
    cfg = load_config("tiny", ["rl.rollouts=2", "sandbox.workers=1", "tasks.template=compact", *overrides])
    engine = build(model=model, tokenizer=tok, n_slots=4, rank=4, alpha=8, lr=1e-3)
    tr = Trainer(cfg, tmp_path / "run", engine=engine, quiet=True)
    tr.setup()
    return tr


@pytest.fixture
def trainer(tmp_path):
    tr = set_up_trainer(tmp_path)
    yield tr
    tr.close()


def _items(tr):
    code_o = tasks.get("code_o")
    good = ProposalTrace(
        "T0",
        "S0",
        "code_o",
        gen=_gen(tr.engine, 0, "p", code_o.render_proposal(PROGRAM, ["4"], template="compact")),
    )
    bad = ProposalTrace("T0", "S0", "code_i", gen=_gen(tr.engine, 0, "p", "no blocks here"))
    return [good, bad]


def test_validate_solve_score_update_rate_metrics(trainer):
    tr = trainer
    items = _items(tr)
    tr.validate(items, step=1)
    good, bad = items
    assert good.valid and good.problem.outputs == ("12",) and good.problem.proposer == "T0"
    assert not bad.valid and bad.reason.startswith("format")
    assert good.features["loc"] == 2 and good.problem in tr.buffers["code_o"]

    tr.solve(items, step=1)  # the real engine answers n = 2 times
    assert len(good.answers) == 2 and not bad.answers
    # overwrite the sampled answers with one right and one wrong answer, written by hand
    code_o = tasks.get("code_o")
    prompt = code_o.student_prompt(good.problem, template="compact")
    good.answers = [
        _gen(tr.engine, 2, prompt, code_o.render_answer("12", template="compact")),
        _gen(tr.engine, 2, prompt, code_o.render_answer("13", template="compact")),
    ]
    tr.score(items)
    assert good.solves == [True, False] and good.formatted == [True, True]
    assert good.reward == 0.5 and bad.reward == -1.0  # 1 - rho with rho = 1/2; invalid -1
    assert good.answer_rewards == [1.0, -0.5] and bad.answer_rewards == []  # right +1, parsed but wrong -0.5

    rows = tr.build_rows(items)
    # teacher, its two student rows, the invalid proposal; groups: the student rows share one baseline
    rewards = [0.5, 1.0, -0.5, -1.0]
    groups = [("teacher", 0), ("student", 0), ("student", 0), ("teacher", 1)]
    assert [r.slot for r in rows] == [0, 2, 2, 0]
    lengths = [len(r.response_ids) for r in rows]
    # by hand: baseline -> [0.5, 0.75, -0.75, -1], then token-weighted whitening
    x, w = [0.5, 0.75, -0.75, -1.0], lengths
    n = sum(w)
    mean = sum(a * b for a, b in zip(x, w, strict=True)) / n
    var = sum((a - mean) ** 2 * b for a, b in zip(x, w, strict=True)) / (n - 1)
    expected = [(a - mean) / math.sqrt(var + 1e-8) for a in x]
    assert [r.advantages for r in rows] == pytest.approx(expected, rel=1e-5)
    assert [r.advantages for r in rows] == pytest.approx(
        reinforce_pp_baseline(torch.tensor(rewards), torch.tensor(lengths), groups, ["batch"] * 4).tolist(),
        rel=1e-6,
    )

    before = tr.engine.get_adapter(2).modules
    tm = tr.update(items)
    assert set(tm) >= {"loss/0", "loss/2", "grad_norm/0", "entropy/2"} and "loss/1" not in tm
    after = tr.engine.get_adapter(2).modules
    assert any(not torch.equal(before[k][1], after[k][1]) for k in before)  # the student's B moved

    matchups = tr.rate([("T0", "S0")], items, step=1)
    # one game: rho = 1/2 is half a point each, the invalid proposal a student point -> teacher share
    # 0.5 / 2 = 0.25 <= 0.5 - 0.1: the student wins, the teacher loses, by the same amount from equal ratings
    assert matchups == [
        {
            "teacher": "T0",
            "student": "S0",
            "solve_rate": 0.5,
            "n_problems": 1,
            "outcome": "student",
            "teacher_points": 0.5,
            "student_points": 1.5,
        }
    ]
    assert tr.pop["T0"].mu < 25.0 and tr.pop["T0"].sigma < 25 / 3 and tr.pop["T0"].games == 1
    assert tr.pop["S0"].mu > 25.0 and tr.pop["S0"].games == 1
    assert tr.pop["T0"].mu + tr.pop["S0"].mu == pytest.approx(50.0)  # zero-sum from equal sigmas

    timings = dict.fromkeys(PHASES, 0.1)

    def record(train_metrics):
        return metrics_record(
            1,
            items,
            train_metrics,
            matchups,
            timings,
            1.0,
            members=tr.pop.ordered(),
            mode="population",
            coverage=tr.coverage,
        )

    rec = record(tm)
    t0, s0 = rec["members"]["T0"], rec["members"]["S0"]
    assert (t0["valid_rate"], t0["reward"], t0["n_valid"], t0["n_proposed"]) == (0.5, -0.25, 1, 2)
    assert t0["solve_rate"] == {"code_i": None, "code_o": 0.5, "code_f": None, "all": 0.5}
    assert t0["complexity"]["loc"] == {"mean": 2.0, "std": 0.0}
    assert (s0["reward"], s0["solve_rate"]["all"], s0["valid_rate"], s0["complexity"]) == (
        0.25,
        0.5,
        None,
        None,
    )
    assert rec["members"]["T1"]["reward"] is None and rec["coverage_cells"] == 1
    assert t0["is_weight"] is None  # rl.tis_cap off: the engine reports no importance weight
    with_tis = record({**tm, "is_weight/0": 0.93})
    assert with_tis["members"]["T0"]["is_weight"] == 0.93 and with_tis["members"]["S0"]["is_weight"] is None
    assert rec["tokens"] == sum(len(it.gen.token_ids) for it in items) + sum(
        len(g.token_ids) for g in good.answers
    )
    assert "step    1/6" in summary_line(rec, [], 6)
    zero = {"win": 0, "draw": 0, "loss": 0}
    assert rec["games"] == {
        "T0": {"win": 0, "draw": 0, "loss": 1},
        "T1": zero,
        "S0": {"win": 1, "draw": 0, "loss": 0},
        "S1": zero,
    }
    assert rec["self_solve_rate"] is None  # population mode
    assert "outcome" not in rec["matchups"][0]  # the game's details are in events.jsonl
    probs = problem_records(1, items)
    assert probs[0]["valid"] and probs[0]["outputs"] == ["12"] and probs[0]["solve_rate"] == 0.5
    assert not probs[1]["valid"] and probs[1]["program"] is None


def test_evolution_replaces_the_loser_in_the_engine(trainer):
    tr = trainer
    tr.cfg.evolution.crossover_with_replaced = False  # the paper's rule: parents only from the survivors
    tr.rng = random.Random(0)
    for m in tr.pop.members.values():
        m.games = 1
    tr.pop["T0"].mu, tr.pop["T1"].mu = 30.0, 20.0
    parent = tr.engine.get_adapter(tr.pop["T0"].slot)
    events = tr.evolve(step=3)
    teacher = next(e for e in events if e["role"] == "teacher")
    assert teacher["replaced"] == "T1" and teacher["parents"] == ["T0"] and teacher["child"] == "T2"
    assert tr.pop["T2"].slot == 1 and "T1" not in tr.pop.members
    child = tr.engine.get_adapter(1)
    assert child.shapes() == parent.shapes()
    assert teacher["child_mu"] == pytest.approx(30.0)


def test_task_schedule_and_memory_estimate(tmp_path):
    assert (
        task_schedule(["code_i", "code_o", "code_f"], 7) == ["code_i"] * 3 + ["code_o"] * 2 + ["code_f"] * 2
    )
    assert task_schedule(["code_o"], 2) == ["code_o", "code_o"]
    (tmp_path / "config.json").write_text(
        '{"hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2, '
        '"num_key_value_heads": 1, "intermediate_size": 16}'
    )
    (tmp_path / "model.safetensors").write_bytes(b"x" * 100)
    base, slot = estimate_memory(tmp_path, rank=2, targets=["q_proj", "k_proj"])
    # q: 8 -> 8, k: 8 -> 4 (one kv head of dim 4): rank 2 * (16 + 12) = 56 params per layer, 2 layers, x4 fp32 x4
    assert base == 100 and slot == 56 * 2 * 16


def test_evolution_from_a_diverged_parent_is_skipped_not_fatal(trainer):
    tr = trainer
    best = max(tr.pop.teachers, key=lambda m: m.mu)
    for m in tr.pop.teachers:
        m.games = 1
    # training diverged in one module of the best teacher (the engine refuses to load NaN, so write it in place)
    next(iter(tr.engine.layers.values())).lora_B.data[best.slot].fill_(float("nan"))
    before = set(tr.pop.members)
    events = tr.evolve(step=6)
    skipped = [e for e in events if e["role"] == "teacher"]
    assert skipped and skipped[0]["type"] == "evolution_skipped" and "NaN" in skipped[0]["reason"]
    assert {m for m in tr.pop.members if m.startswith("T")} == {m for m in before if m.startswith("T")}
