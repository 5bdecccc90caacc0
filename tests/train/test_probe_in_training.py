"""The fixed probe during training (train/probe.py): what it scores, when, and how it is logged and shown."""

import json

import pytest

from populora import tasks
from populora.config import ConfigError, load_config, to_yaml
from populora.diagnostics.probe import probe_by_role, probe_change
from populora.diagnostics.run import load_run
from populora.diagnostics.schema import check_run
from populora.engine import Generation, build
from populora.engine.testing import random_model
from populora.pretrain.probe import score_probe
from populora.report.html import render_compare, render_report
from populora.sandbox import Sandbox
from populora.train.probe import Prober, probe_subset, score_members
from populora.train.setup import build_engine
from populora.train.trainer import Trainer


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=1) as sb:
        yield sb


class GoldEngine:
    """Answers probe prompts by slot: slot 0 always right, slot 1 right on every other problem, slot 2 never.

    Only `generate` is used by the scorer; parsing and sandbox scoring stay real."""

    def __init__(self, problems):
        self.answers = {}
        for task, ps in problems.items():
            t = tasks.get(task)
            for i, p in enumerate(ps):
                prompt = t.student_prompt(p, template="compact")
                gold = t.render_answer(t.gold_answer(p), template="compact")
                self.answers[prompt] = (gold, i % 2 == 0)
        self.calls = 0

    def generate(self, requests, seed=None):
        self.calls += 1
        out = []
        for r in requests:
            assert r.temperature == 0.0  # the probe is greedy
            gold, even = self.answers[r.prompt]
            right = r.slot == 0 or (r.slot == 1 and even)
            text = gold if right else "```output\nnot an answer at all\n```"
            out.append(Generation([1], text, [0.0], "stop", slot=r.slot))
        return out


def test_score_members_scores_each_member_on_its_own_answers(sandbox):
    problems = probe_subset(4)
    assert {t: len(ps) for t, ps in problems.items()} == {"code_i": 4, "code_o": 4, "code_f": 4}
    assert problems == probe_subset(4)  # the same subset every time
    engine = GoldEngine(problems)
    acc = score_members(engine, {"S0": 0, "S1": 1, "T0": 2}, problems, sandbox)
    assert engine.calls == 1  # every member's prompts in one mixed-slot batch
    assert acc == {
        "S0": {"code_i": 1.0, "code_o": 1.0, "code_f": 1.0},
        "S1": {"code_i": 0.5, "code_o": 0.5, "code_f": 0.5},
        "T0": {"code_i": 0.0, "code_o": 0.0, "code_f": 0.0},
    }


def test_score_members_agrees_with_the_single_slot_scorer_on_the_bundled_model(sandbox):
    cfg = load_config("tiny", ["population.teachers=1", "population.students=1", "train.threads=1"])
    engine = build_engine(cfg)
    try:
        problems = probe_subset(3)
        many = score_members(engine, {"T0": 0, "S0": 1}, problems, sandbox)
        one = score_probe(engine, 0, problems, "compact", None, sandbox)
    finally:
        engine.close()
    assert many["T0"] == one == many["S0"]  # fresh adapters (B = 0) are the base model


# A 4-member tiny run on a random model, probed on 2 items per task type with short budgets (quick).
QUICK_PROBED_RUN = [
    "train.threads=1",
    "rl.rollouts=1",
    "tasks.prompts=3",
    "tasks.teacher_max_new_tokens=8",
    "tasks.student_max_new_tokens=8",
    "tasks.seed_synthetic=2",
    "sandbox.workers=1",
    "diagnostics.probe_size=2",
    "diagnostics.probe_proposals=2",
]


def _probed_trainer(tmp_path, seed: int, overrides: list[str]) -> Trainer:
    """A set-up trainer of QUICK_PROBED_RUN + `overrides` writing to tmp_path / "run"."""
    model, tok = random_model(seed=seed)
    cfg = load_config("tiny", QUICK_PROBED_RUN + overrides)
    engine = build(model=model, tokenizer=tok, n_slots=4, rank=4, alpha=8, lr=1e-3)
    tr = Trainer(cfg, tmp_path / "run", engine=engine, quiet=True)
    tr.prober.budget = dict.fromkeys(tr.prober.budget, 4)  # a random model: short answers keep it quick
    tr.setup()
    tr.run.write_config(to_yaml(cfg))
    return tr


def test_probe_config_keys_are_checked():
    cfg = load_config("tiny", ["diagnostics.probe_every=5", "diagnostics.probe_size=32"])
    assert (cfg.diagnostics.probe_every, cfg.diagnostics.probe_size) == (5, 32)
    assert load_config("tiny").diagnostics.probe_every == 0  # off unless asked for
    with pytest.raises(ConfigError, match="diagnostics.probe_size"):
        load_config("tiny", ["diagnostics.probe_size=0"])
    with pytest.raises(ConfigError, match="diagnostics.probe_every"):
        load_config("tiny", ["diagnostics.probe_every=-1"])
    with pytest.raises(ConfigError, match=r"diagnostics.probe_proposals: must be in \[0, 128\]"):
        load_config("tiny", ["diagnostics.probe_proposals=129"])
    assert Prober.from_config(load_config("tiny", ["diagnostics.probe_proposals=0"])).proposals == 0
    p = Prober.from_config(cfg)
    assert [s for s in range(11) if p.due(s)] == [0, 5, 10]


def test_trainer_logs_the_probe_at_step_0_and_every_k_steps(tmp_path):
    tr = _probed_trainer(
        tmp_path,
        0,
        [
            "train.steps=3",  # evolution at step 2 (never at the final step)
            "train.checkpoint_every=3",
            "evolution.every=2",
            "diagnostics.probe_every=2",
            "diagnostics.probe_set=graded",  # the stratified sets: items of levels 1 and 2, read per level
            "diagnostics.probe_styles=true",  # and the forced answer styles (`probe_style`)
        ],
    )
    try:
        tr.fit(0)
        tr.prober.at_start(tr, 0)  # a restart at step 0 keeps the step-0 probe instead of adding one
    finally:
        tr.close()
    run_dir = tmp_path / "run"
    recs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs] == [0, 1, 2, 3]
    assert "members" not in recs[0] and "probe" not in recs[1] and "probe" not in recs[3]
    members = {"T0", "T1", "S0", "S1"}
    assert set(recs[0]["probe"]) == members
    # step 2 evolved: the probe scores the members alive after evolution, children included
    born = {
        e["child"]
        for e in map(json.loads, (run_dir / "events.jsonl").read_text().splitlines())
        if e.get("type") == "evolution"
    }
    replaced = {
        e["replaced"]
        for e in map(json.loads, (run_dir / "events.jsonl").read_text().splitlines())
        if e.get("type") == "evolution"
    }
    assert born and set(recs[2]["probe"]) == (members - replaced) | born
    # the teachers' validity probe: the teachers alive at each probe, a rate per task type
    assert set(recs[0]["probe_valid"]) == {"T0", "T1"} and "probe_valid" not in recs[1]
    teachers_then = {m for m in set(recs[2]["probe"]) if m.startswith("T")}
    assert set(recs[2]["probe_valid"]) == teachers_then
    for rates in (*recs[0]["probe_valid"].values(), *recs[2]["probe_valid"].values()):
        assert set(rates) == {"code_i", "code_o", "code_f"} and all(
            r in (0.0, 0.5, 1.0) for r in rates.values()
        )
    for rec in (recs[0], recs[2]):
        for accs in rec["probe"].values():
            assert set(accs) == {"code_i", "code_o", "code_f"}
            assert all(0.0 <= a <= 1.0 for a in accs.values())
    for rec in (recs[0], recs[2]):  # one item per level: the level's accuracy is that item's verdict
        assert set(rec["probe_levels"]) == set(rec["probe"])
        for m, by_task in rec["probe_levels"].items():
            for t, by_level in by_task.items():
                assert set(by_level) == {"1", "2"} and sum(by_level.values()) / 2 == rec["probe"][m][t]
    lines = [json.loads(x) for x in (run_dir / "probe_items.jsonl").read_text().splitlines()]
    assert all(line["items"][t]["level"] == [1, 2] for line in lines for t in line["items"])
    assert check_run(run_dir) == []
    run = load_run(run_dir)
    assert run.n_steps == 3 and list(run.probe_steps) == [0, 2]  # the step-0 probe is not a step
    # probe_items.jsonl: one verdict per (probe, member, task, item), the same accuracies as `probe`
    for which in ("free", "trace", "bare"):
        items = run.probe_items(which)
        for rec in (recs[0], recs[2]):
            for m, accs in rec["probe"].items():
                for t in accs:
                    mine = [r for r in items if (r["step"], r["member"], r["task"]) == (rec["step"], m, t)]
                    if which != "free" and t != "code_o":
                        assert mine == []  # only code_o has two answer styles
                        continue
                    assert [r["item"] for r in mine] == [0, 1]
                    acc = sum(r["correct"] for r in mine) / len(mine)
                    row = rec["probe_style"][m]["code_o"] if t == "code_o" else {}
                    assert acc == (accs[t] if which == "free" else row[which])
                    if t == "code_o" and which == "free":
                        assert row["free"] == accs["code_o"]
                        assert row["trace_share"] == sum(r["style"] == "trace" for r in mine) / len(mine)
    curves = probe_by_role(run)
    assert set(curves) == {"teacher", "student"}
    assert list(curves["student"]["all"].steps) == [0, 2]
    assert probe_change(run, "student") is not None
    page = render_report(run)
    assert 'id="probe"' in page and "Fixed probe" in page and "No probe logged" not in page
    assert 'id="probe_valid"' in page and "No teacher validity probe" not in page
    assert set(probe_by_role(run, "probe_valid")) == {"teacher"}  # only proposers are probed for validity
    cmp = render_compare([run, load_run(run_dir, label="again")])
    assert 'id="probe"' in cmp and 'id="probe_valid"' in cmp and "No run logged a teacher validity" not in cmp


def test_schema_rejects_a_malformed_probe(tmp_path):
    from populora.diagnostics.schema import check_metrics_record

    ok = {"step": 0, "time": 0.0, "mode": "population", "probe": {"S0": {"code_o": 0.5}}}
    assert check_metrics_record(ok) == []
    assert check_metrics_record({**ok, "probe": {"S0": {"code_x": 0.5}}})
    assert check_metrics_record({**ok, "probe": {"S0": {"code_o": 1.5}}})
    assert check_metrics_record({"step": 0, "probe": {"S0": {"code_o": 0.5}}})  # time and mode missing
    assert check_metrics_record({**ok, "probe_valid": {"T0": {"code_f": 0.25}}}) == []
    (err,) = check_metrics_record({**ok, "probe_valid": {"T0": {"code_f": -0.25}}})
    assert "probe_valid['T0']['code_f'] must be a number in [0, 1]" in err


# -- the teachers' validity probe (probe_valid) -----------------------------------------------------------


def test_teacher_probe_prompts_are_fixed_and_read_from_the_end_of_the_probe_sets():
    from populora.pretrain.probe import load_probe
    from populora.train.probe import teacher_probe_prompts

    by_name = {t: tasks.get(t) for t in ("code_i", "code_o", "code_f")}
    prompts = teacher_probe_prompts(by_name, 3, 2, "compact")
    assert prompts == teacher_probe_prompts(by_name, 3, 2, "compact")  # the same in every run
    assert [p[0] for p in prompts] == ["code_i"] * 3 + ["code_o"] * 3 + ["code_f"] * 3
    code_i, code_f = load_probe("code_i"), load_probe("code_f")
    # prompt j of code_i shows probe problems -(2j+1) and -(2j+2); code_f prompt j writes inputs for -(j+1)
    assert prompts[1][1] == by_name["code_i"].teacher_prompt([code_i[-3], code_i[-4]], template="compact")
    assert prompts[8][2] == code_f[-3].program and prompts[8][1].count(code_f[-3].program) == 1
    assert all(shown is None for name, _, shown in prompts if name != "code_f")
    # a specialist run's teachers propose one task type: only that type is probed for validity
    only = teacher_probe_prompts({"code_o": by_name["code_o"]}, 2, 2, "compact")
    assert [p[0] for p in only] == ["code_o", "code_o"] and only == prompts[3:5]


class ProposalEngine:
    """Answers the teachers' probe prompts by slot: slot 0 writes a valid proposal (a probe problem's own
    program and input), any other slot writes text with no proposal in it. Parsing and the sandbox stay real."""

    def __init__(self, prompts):
        from populora.pretrain.probe import load_probe

        self.gold = {}
        for j, (name, prompt, shown) in enumerate(prompts):
            # code_f: the shown program with its own probe inputs; code_i/code_o: any probe problem
            p = next(q for q in load_probe(name) if q.program == shown) if shown else load_probe(name)[j]
            text = tasks.get(name).render_proposal(
                p.program, p.inputs, "probe the branches", template="compact"
            )
            self.gold[prompt] = text
        self.seen = []

    def generate(self, requests, seed=None):
        self.seen.append((seed, {r.temperature for r in requests}))
        return [
            Generation([1], self.gold[r.prompt] if r.slot == 0 else "no proposal here", [0.0], "stop", r.slot)
            for r in requests
        ]


def test_score_teachers_validates_in_the_sandbox_and_feeds_nothing(tmp_path):
    from populora.train.probe import VALID_PROBE_SEED, score_teachers, teacher_probe_prompts

    model, tok = random_model(seed=0)
    cfg = load_config(
        "tiny",
        ["train.threads=1", "tasks.seed_synthetic=2", "sandbox.workers=1", "rl.teacher_temperature=0.9"],
    )
    engine = build(model=model, tokenizer=tok, n_slots=4, rank=4, alpha=8, lr=1e-3)
    tr = Trainer(cfg, tmp_path / "run", engine=engine, quiet=True)
    tr.setup()
    try:
        prompts = teacher_probe_prompts(tr.tasks, 2, cfg.tasks.references, "compact")
        before = {t: len(tr.buffers[t]) for t in ("code_i", "code_o")}
        fake = ProposalEngine(prompts)
        tr.engine = fake
        slot0 = next(m.id for m in tr.pop.ordered() if m.slot == 0)
        other = next(m.id for m in tr.pop.ordered() if m.role == "teacher" and m.slot != 0)
        rates = score_teachers(tr, [slot0, other], prompts)
        after = {t: len(tr.buffers[t]) for t in ("code_i", "code_o")}
        tr.engine = engine
    finally:
        tr.close()
    assert rates[slot0] == {"code_i": 1.0, "code_o": 1.0, "code_f": 1.0}
    assert rates[other] == {"code_i": 0.0, "code_o": 0.0, "code_f": 0.0}
    assert before == after  # measuring the teachers puts nothing in the buffers
    assert fake.seen == [(VALID_PROBE_SEED, {0.9})]  # one batch, the teachers' temperature, the fixed seed


def test_probe_roles_solvers_scores_the_students_only(tmp_path):
    with pytest.raises(ConfigError, match="diagnostics.probe_roles: 'teachers' is not allowed"):
        load_config("tiny", ["diagnostics.probe_roles=teachers"])
    overrides = [
        "train.steps=1",
        "train.checkpoint_every=1",
        "evolution.every=0",
        "diagnostics.probe_every=1",
    ]
    tr = _probed_trainer(tmp_path, 1, [*overrides, "diagnostics.probe_roles=solvers"])
    assert tr.prober.roles == "solvers"
    try:
        tr.fit(0)
    finally:
        tr.close()
    run_dir = tmp_path / "run"
    recs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs] == [0, 1]
    for rec in recs:
        assert set(rec["probe"]) == {"S0", "S1"}  # the teachers are not asked ...
        assert set(rec["probe_valid"]) == {"T0", "T1"}  # ... but their validity probe still runs
    items = [json.loads(x) for x in (run_dir / "probe_items.jsonl").read_text().splitlines()]
    assert all(set(line["answers"]["free"]) == {"S0", "S1"} for line in items)
    assert check_run(run_dir) == []
    run = load_run(run_dir)
    assert set(probe_by_role(run)) == {"student"} and probe_change(run, "student") is not None
    page = render_report(run)
    assert 'id="probe"' in page and "No probe logged" not in page
