"""Sampled pass@1 on the probe (train/probe_sampled.py, `diagnostics.probe_samples`): per-item counts, one fixed
evaluation seed, and its place in metrics.jsonl and probe_items.jsonl of a real run."""

import json

import pytest

from populora import tasks
from populora.config import ConfigError, load_config, to_yaml
from populora.diagnostics.run import load_run
from populora.diagnostics.schema import check_run
from populora.engine import Generation, build
from populora.engine.testing import random_model
from populora.experiment.probe_data import probe_change
from populora.report.html import render_report
from populora.sandbox import Sandbox
from populora.train.probe import probe_subset, score_members
from populora.train.probe_sampled import EVAL_SEED, pass_at_1, sampled_solves
from populora.train.setup import build_engine
from populora.train.trainer import Trainer


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=1) as sb:
        yield sb


class CountingEngine:
    """Item k of a task gets k % (samples + 1) right answers of its `samples` from slot 0, none from slot 1;
    parsing and sandbox scoring stay real."""

    def __init__(self, problems, samples):
        self.samples, self.seen, self.index = samples, [], {}
        for task, ps in problems.items():
            t = tasks.get(task)
            for i, p in enumerate(ps):
                gold = t.render_answer(t.gold_answer(p), template="compact")
                self.index[t.student_prompt(p, template="compact")] = (i, gold)

    def generate(self, requests, seed=None, **kw):
        self.seen.append((len(requests), seed, {r.temperature for r in requests}))
        out, position = [], {}
        for r in requests:
            i, gold = self.index[r.prompt]
            j = position[r.prompt, r.slot] = position.get((r.prompt, r.slot), -1) + 1
            right = r.slot == 0 and j < i % (self.samples + 1)
            out.append(Generation([1], gold if right else "```output\nnope\n```", [0.0], "stop", slot=r.slot))
        return out


def test_counts_are_per_member_and_item(sandbox):
    problems = probe_subset(5, ("code_o", "code_i"))
    eng = CountingEngine(problems, samples=3)
    budget = dict.fromkeys(problems, 64)
    counts = sampled_solves(eng, {"good": 0, "bad": 1}, problems, sandbox, 3, 0.7, budget)
    assert counts["good"] == {"code_o": [0, 1, 2, 3, 0], "code_i": [0, 1, 2, 3, 0]}
    assert counts["bad"] == {"code_o": [0] * 5, "code_i": [0] * 5}
    assert eng.seen == [(2 * 5 * 2 * 3, EVAL_SEED, {0.7})]  # one batch, the fixed seed, the temperature
    assert pass_at_1(counts, 3)["good"]["code_o"] == pytest.approx(6 / 15)
    with pytest.raises(ValueError, match="temperature > 0"):
        sampled_solves(eng, {"good": 0}, problems, sandbox, 3, 0.0, budget)


def test_the_bundled_model_samples_alike_twice_and_near_greedy_when_cold(sandbox):
    cfg = load_config("tiny", ["population.teachers=1", "population.students=1", "train.threads=1"])
    eng = build_engine(cfg)
    try:
        problems = probe_subset(12, ("code_o",))
        budget = {"code_o": 64}
        a = sampled_solves(eng, {"s": 0}, problems, sandbox, 2, 1.0, budget)
        b = sampled_solves(eng, {"s": 0}, problems, sandbox, 2, 1.0, budget)
        assert a == b  # one evaluation seed: an unchanged adapter reads the same
        cold = sampled_solves(eng, {"s": 0}, problems, sandbox, 1, 1e-3, budget)["s"]["code_o"]
        greedy = score_members(eng, {"s": 0}, problems, sandbox, max_new_tokens=budget)["s"]["code_o"]
        # at T -> 0 a sample is the argmax: pass@1 is the greedy accuracy (ties aside)
        assert abs(sum(cold) / len(cold) - greedy) <= 1 / 12
    finally:
        eng.close()


def test_a_run_logs_sampled_pass_at_1_beside_greedy(tmp_path):
    with pytest.raises(ConfigError, match="diagnostics.probe_samples"):
        load_config("tiny", ["diagnostics.probe_samples=65"])
    with pytest.raises(ConfigError, match="diagnostics.probe_temperature"):
        load_config("tiny", ["diagnostics.probe_samples=4", "diagnostics.probe_temperature=0"])
    overrides = [
        *("population.teachers=1", "population.students=1", "tasks.prompts=3", "tasks.seed_synthetic=2"),
        *("tasks.teacher_max_new_tokens=8", "tasks.student_max_new_tokens=8", "sandbox.workers=1"),
        *("train.steps=1", "train.checkpoint_every=1", "evolution.every=0", "rl.rollouts=2"),
        *("diagnostics.probe_every=1", "diagnostics.probe_size=3", "diagnostics.probe_proposals=0"),
        "diagnostics.probe_samples=3",
    ]
    cfg = load_config("tiny", overrides)
    model, tok = random_model(seed=2)
    tr = Trainer(
        cfg, tmp_path / "run", engine=build(model=model, tokenizer=tok, n_slots=2, rank=4), quiet=True
    )
    tr.prober.budget = dict.fromkeys(tr.prober.budget, 4)  # a random model: short answers keep it quick
    tr.setup()
    tr.run.write_config(to_yaml(cfg))
    try:
        tr.fit(0)
    finally:
        tr.close()
    run_dir = tmp_path / "run"
    recs = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    items = [json.loads(x) for x in (run_dir / "probe_items.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs] == [0, 1]
    for rec, line in zip(recs, items, strict=True):
        assert set(rec["probe_sampled"]) == set(rec["probe"])  # every member the greedy probe reads
        assert line["samples"] == 3 and line["temperature"] == 1.0
        for member, per_task in line["sampled"].items():
            for task, counts in per_task.items():
                assert len(counts) == len(line["items"][task]["id"]) and all(0 <= c <= 3 for c in counts)
                assert rec["probe_sampled"][member][task] == pytest.approx(sum(counts) / (3 * len(counts)))
    assert check_run(run_dir) == []
    # read back as the experiments read it: one record per (step, member, task, item), the share right
    recs = load_run(run_dir).probe_items("sampled")
    last = items[-1]
    member, task = next((m, t) for m, per in last["sampled"].items() for t in per)
    mine = [r["correct"] for r in recs if (r["step"], r["member"], r["task"]) == (1, member, task)]
    assert mine == [c / 3 for c in last["sampled"][member][task]]
    assert {r["answers"] for r in recs} == {"sampled"} and not load_run(run_dir).probe_items("free") == recs
    change = probe_change(run_dir, "sampled")
    assert change is not None and change.values.shape[1] == 3 * len(last["items"])
    page = render_report(load_run(run_dir))
    card = page[page.index('id="probe_sampled"') :]
    card = card[: card.index("</section>")]
    assert "<img" in card and "answers per item at temperature 1.0" in card
