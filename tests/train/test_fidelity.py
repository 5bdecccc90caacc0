"""Paper fidelity (issue 12): the baseline differs from the population only in agent count, ratings agree
with the rewards, no evolution after the last step, the applied operator is what the lineage records, and
paper-7b seeds from AZR's seed files. Real engine (a tiny random model), real sandbox, hand-made traces."""

import json
import random
import shutil

import pytest

from populora.config import load_config
from populora.engine import Generation, TrainBatch, build
from populora.engine.testing import random_model
from populora.rl.loss import row_weights
from populora.train import evolve as evolve_mod
from populora.train import trainer as trainer_mod
from populora.train.records import ProposalTrace
from populora.train.trainer import Trainer


def _gen(slot: int, n: int, offset: int = 0) -> Generation:
    ids = [5 + (offset + i) % 17 for i in range(n)]
    return Generation(ids, "", [-1.0] * n, "stop", prompt_ids=[1, 2, 3, 4], slot=slot)


def _step_traces(teacher: str, student: str, t_slot: int, s_slot: int) -> list[ProposalTrace]:
    """One matchup's step: 3 proposals (2 valid with 4 answers each, 1 invalid), rewards set by hand. The
    proposer's rows are ~6x fewer than the solver's, the ratio the issue describes at n = 8."""
    out = []
    for i, (task, valid, solves) in enumerate(
        [("code_i", True, [1, 0, 0, 0]), ("code_o", True, [1, 1, 0, 1]), ("code_f", False, [])]
    ):
        tr = ProposalTrace(teacher, student, task, gen=_gen(t_slot, 6 + 3 * i, i))
        if valid:
            tr.problem = object()  # `valid` only asks whether there is one
            tr.answers = [_gen(s_slot, 4 + j, 7 * i + j) for j in range(len(solves))]
            tr.solves = [bool(x) for x in solves]
            tr.formatted = [True] * len(solves)
            tr.answer_rewards = [1.0 if x else -0.5 for x in solves]
            rho = sum(solves) / len(solves)
            tr.reward = 1 - rho
        else:
            tr.reward = -1.0
        out.append(tr)
    return out


def _trainer(tmp_path, name: str, overrides: list[str], n_slots: int) -> Trainer:
    model, tok = random_model(seed=0)
    cfg = load_config("tiny", ["sandbox.workers=1", *overrides])
    engine = build(model=model, tokenizer=tok, n_slots=n_slots, rank=4, alpha=8, lr=1e-3)
    return Trainer(cfg, tmp_path / name, engine=engine, quiet=True)


# ------------------------------------------------------------------------------------------ 1. fair baseline
def test_baseline_and_population_whiten_and_normalise_each_role_alike(tmp_path):
    pop = _trainer(tmp_path, "pop", [], n_slots=4)
    single = _trainer(tmp_path, "single", ["population.mode=single"], n_slots=1)
    rows_p = pop.build_rows(_step_traces("T0", "S0", 0, 2))
    rows_s = single.build_rows(_step_traces("A0", "A0", 0, 0))
    assert len(rows_p) == len(rows_s) == 3 + 8
    lengths = [len(r.response_ids) for r in rows_p]
    assert lengths == [len(r.response_ids) for r in rows_s]
    # the same advantage scope: identical advantages for identical rewards
    assert [r.advantages for r in rows_s] == pytest.approx([r.advantages for r in rows_p], abs=1e-6)
    # the same loss normalisation per role: each proposer row weighs what the teacher's row weighs
    w_p = row_weights(lengths, [r.loss_key for r in rows_p])
    w_s = row_weights(lengths, [r.loss_key for r in rows_s])
    assert w_s == pytest.approx(w_p)
    proposer = [
        w * len(r.response_ids) for w, r in zip(w_s, rows_s, strict=True) if r.loss_group == "teacher"
    ]
    assert len(proposer) == 3 and sum(proposer) == pytest.approx(1.0)  # a token-mean of its own
    # and in the engine: at B = 0 every slot is the base model, so the single agent's loss is exactly the
    # teacher's plus the student's (the old pooled token-mean made the proposer's part ~6x smaller)
    m_p = pop.engine.train_step(TrainBatch(rows_p))
    m_s = single.engine.train_step(TrainBatch(rows_s))
    assert m_s["loss/0"] == pytest.approx(m_p["loss/0"] + m_p["loss/2"], rel=1e-4)
    for t in (pop, single):
        t.run.close()


def test_trr_plus_plus_and_the_pooled_loss_stay_options(tmp_path):
    single = _trainer(tmp_path, "s", ["population.mode=single", "rl.whiten_scope=task_role"], n_slots=1)
    assert single.cfg.effective_whiten_scope == "task_role"
    rows = single.build_rows(_step_traces("A0", "A0", 0, 0))
    pop = _trainer(tmp_path, "p", [], n_slots=4)
    rows_p = pop.build_rows(_step_traces("T0", "S0", 0, 2))
    assert [r.advantages for r in rows] != pytest.approx([r.advantages for r in rows_p], abs=1e-6)
    pooled = _trainer(tmp_path, "m", ["population.mode=single", "rl.loss_norm=member"], n_slots=1)
    assert {r.loss_key for r in pooled.build_rows(_step_traces("A0", "A0", 0, 0))} == {(0, "")}
    for t in (single, pop, pooled):
        t.run.close()


# ------------------------------------------------------------------------------------------ 2. honest ratings
def _matchup(teacher: str, student: str, kinds: list) -> list[ProposalTrace]:
    """Hand-made proposals: 'invalid', or the number of the student's 8 answers that solve it."""
    out = []
    for k in kinds:
        tr = ProposalTrace(teacher, student, "code_o")
        if k == "invalid":
            tr.reward = -1.0
        else:
            tr.problem = object()
            tr.solves = [True] * k + [False] * (8 - k)
            tr.formatted = [True] * 8
            tr.answer_rewards = [1.0] * k + [-0.5] * (8 - k)
            tr.reward = 1 - k / 8 if k else 0.0
        out.append(tr)
    return out


def test_a_teacher_posing_unsolvable_or_invalid_problems_is_not_rated_up(tmp_path):
    tr = _trainer(tmp_path, "r", ["population.teachers=3", "population.students=3"], n_slots=6)
    # three teachers face equally rated students: solvable-but-hard (1 of 8 rollouts right: three teacher
    # points), unsolved by all (no sign the batch is solvable: a forfeit, three student points), mostly invalid
    # (two student points, one teacher point)
    traces = (
        _matchup("T0", "S0", [1, 1, 1])
        + _matchup("T1", "S1", [0, 0, 0])
        + _matchup("T2", "S2", ["invalid", "invalid", 1])
    )
    res = {m["teacher"]: m for m in tr.rate([("T0", "S0"), ("T1", "S1"), ("T2", "S2")], traces, step=1)}
    mu = {m: tr.pop[m].mu for m in ("T0", "T1", "T2", "S0", "S1", "S2")}
    assert mu["T0"] > mu["T2"] and mu["T0"] > mu["T1"]  # more reward, better rating: evolution culls T1/T2
    assert (res["T0"]["outcome"], res["T0"]["teacher_points"], res["T0"]["student_points"]) == (
        "teacher",
        3,
        0,
    )
    assert (res["T1"]["outcome"], res["T1"]["teacher_points"], res["T1"]["student_points"]) == (
        "student",
        0,
        3,
    )
    assert (res["T2"]["outcome"], res["T2"]["teacher_points"], res["T2"]["student_points"]) == (
        "student",
        1,
        2,
    )
    assert mu["T1"] == pytest.approx(mu["T2"])  # both lost one game to an equally rated student
    for t, s in (("T0", "S0"), ("T1", "S1"), ("T2", "S2")):  # one game: what one side gains the other loses
        assert mu[t] + mu[s] == pytest.approx(50.0)
    tr.run.close()


def test_no_valid_problem_is_a_student_win(tmp_path):
    tr = _trainer(tmp_path, "r", [], n_slots=4)
    [m] = tr.rate([("T0", "S0")], _matchup("T0", "S0", ["invalid", "invalid"]), step=1)
    assert m["outcome"] == "student" and m["n_problems"] == 0 and m["solve_rate"] is None
    assert tr.pop["S0"].mu > 25 > tr.pop["T0"].mu and tr.pop["S0"].games == tr.pop["T0"].games == 1
    tr.run.close()


# ------------------------------------------------------------------------------------------ 3. last step
@pytest.fixture
def stepper(tmp_path):
    model, tok = random_model(seed=0)
    cfg = load_config(
        "tiny",
        [
            "sandbox.workers=1",
            "train.steps=2",
            "evolution.every=1",
            "tasks.prompts=3",
            "tasks.teacher_max_new_tokens=8",
            "tasks.student_max_new_tokens=8",
            "tasks.seed_synthetic=0",
        ],
    )
    engine = build(model=model, tokenizer=tok, n_slots=4, rank=4, alpha=8, lr=1e-3)
    tr = Trainer(cfg, tmp_path / "run", engine=engine, quiet=True)
    tr.setup()
    yield tr
    tr.close()


def test_no_evolution_after_the_last_step(stepper):
    first = stepper.step(1)
    assert any(e["type"] == "evolution" for e in first.events)  # evolution runs every step but the last
    last = stepper.step(2)
    assert not [e for e in last.events if e["type"].startswith("evolution")]
    assert trainer_mod.evolves_at(1, stepper.cfg) and not trainer_mod.evolves_at(2, stepper.cfg)


def test_the_lineage_records_the_operator_applied(stepper, monkeypatch):
    real = evolve_mod.apply

    def declining(name, parents, seed=0, **params):
        # a real child whose operator declined its recipe, as X4 does when its parents disagree
        child = real(name, parents=parents, seed=seed, **params)
        child.metadata["lineage"]["operator"] = "X5"
        return child

    monkeypatch.setattr(evolve_mod, "apply", declining)  # the operators as phase (5) calls them
    stepper.rng = random.Random(0)
    for m in stepper.pop.members.values():
        m.games = 1
    events = [e for e in stepper.evolve(step=1) if e["type"] == "evolution"]
    assert events and all(e["operator"] == "X5" for e in events)
    assert {stepper.pop[e["child"]].operator for e in events} == {"X5"}
    assert all(e["planned"] in stepper.cfg.evolution.operators for e in events)
    assert all("declined" in e and "cos" in e for e in events)  # what the operator did (null: nothing to say)


# ------------------------------------------------------------------------------------------ 6. AZR seeds
def test_paper_presets_seed_from_the_azr_files():
    for preset in ("paper-7b", "ablation-1t1s", "ablation-2t2s", "ablation-8t8s", "ablation-single"):
        tk = load_config(preset).tasks
        assert tk.seed_io == "azr_seed/7b_coder_seed_io.jsonl", preset
        assert tk.seed_code_f == "azr_seed/7b_coder_code_f_seed_io.jsonl", preset
    assert load_config("tiny").tasks.seed_io == ""  # the tiny model seeds from its generator instead


def test_seed_names_resolve_under_the_data_root(tmp_path, monkeypatch):
    from populora.train.seed_files import SeedFileError, resolve_seed_file

    root = tmp_path / "data"
    (root / "azr_seed").mkdir(parents=True)
    (root / "azr_seed" / "x_seed_io.jsonl").write_text("{}\n")
    monkeypatch.setenv("POPULORA_DATA_DIR", str(root))
    assert resolve_seed_file("azr_seed/x_seed_io.jsonl", "tasks.seed_io") == str(
        root / "azr_seed/x_seed_io.jsonl"
    )
    path = tmp_path / "mine.jsonl"
    path.write_text("{}\n")
    assert resolve_seed_file(str(path), "tasks.seed_io") == str(path)  # a path is a path
    assert resolve_seed_file("", "tasks.seed_io") == ""
    with pytest.raises(SeedFileError) as err:
        resolve_seed_file("azr_seed/nope.jsonl", "tasks.seed_code_f")
    assert "tasks.seed_code_f=azr_seed/nope.jsonl" in str(err.value) and "POPULORA_DATA_DIR" in str(err.value)


def _resumable(run, steps: int) -> Trainer:
    model, tok = random_model(seed=0)
    cfg = load_config(
        "tiny",
        [
            "sandbox.workers=1",
            f"train.steps={steps}",
            "train.checkpoint_every=1",
            "evolution.every=1",
            "tasks.prompts=3",
            "tasks.teacher_max_new_tokens=8",
            "tasks.student_max_new_tokens=8",
            "tasks.seed_synthetic=0",
        ],
    )
    engine = build(model=model, tokenizer=tok, n_slots=4, rank=4, alpha=8, lr=1e-3)
    tr = Trainer(cfg, run, engine=engine, quiet=True)
    tr.setup()
    return tr


def _read(run) -> list[dict]:
    return [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]


def test_a_longer_resume_runs_the_evolution_the_final_step_skipped(tmp_path):
    run = tmp_path / "run"
    tr = _resumable(run, steps=1)
    tr.fit()  # one step, the final one: its evolution is skipped and marked pending
    tr.close()
    assert not [e for e in _read(run) if e["type"] == "evolution"]
    shutil.copytree(run, tmp_path / "killed")

    tr = _resumable(run, steps=2)
    assert tr.restore() == 1  # trains on to step 2: the skipped evolution runs first, then a checkpoint
    tr.close()
    evo = [e for e in _read(run) if e["type"] == "evolution"]
    assert evo and all(e["step"] == 1 for e in evo)

    # an earlier attempt logged those events and was killed before its checkpoint: not logged twice
    killed = tmp_path / "killed"
    (killed / "events.jsonl").write_text((run / "events.jsonl").read_text())
    tr = _resumable(killed, steps=2)
    tr.restore()
    tr.close()
    again = [e for e in _read(killed) if e["type"] == "evolution"]
    assert [e["child"] for e in again] == [e["child"] for e in evo]


def test_a_resume_clears_what_a_kill_mid_prune_left(tmp_path):
    """A kill after the last checkpoint was written but while an older one was being pruned leaves its renamed
    folder; the resume has no step left to save, so it must clear it itself (test_kill_resume hit this)."""
    run = tmp_path / "run"
    tr = _resumable(run, steps=1)
    tr.fit()
    tr.close()
    doomed = run / "checkpoints" / ".tmp-prune-step_000000-4242"
    (doomed / "adapters").mkdir(parents=True)
    (doomed / "state.json").write_text("{}")
    tr = _resumable(run, steps=1)
    assert tr.restore() == 1
    tr.close()
    assert not doomed.exists()
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["step_000001"]


def test_role_task_groups_give_each_task_type_a_token_mean_of_its_own(tmp_path):
    # rl.loss_norm=role_task: code_i's short answers are no longer outweighed by code_o's long ones
    tr = _trainer(tmp_path, "rt", ["rl.loss_norm=role_task"], n_slots=4)
    rows = tr.build_rows(_step_traces("T0", "S0", 0, 2))
    keys = [r.loss_key for r in rows]
    assert set(keys) == {
        (0, "teacher/code_i"),
        (0, "teacher/code_o"),
        (0, "teacher/code_f"),
        (2, "student/code_i"),
        (2, "student/code_o"),
    }
    weights = row_weights([len(r.response_ids) for r in rows], keys)
    per_group: dict = {}
    for w, r in zip(weights, rows, strict=True):
        per_group[r.loss_key] = per_group.get(r.loss_key, 0.0) + w * len(r.response_ids)
    assert list(per_group.values()) == pytest.approx([1.0] * 5)  # each group one token-mean
    tr.run.close()


def test_loss_agg_reaches_the_engine(tmp_path):
    from populora.train.setup import build_engine

    cfg = load_config("tiny", ["rl.loss_agg=seq-mean-token-mean"])
    eng = build_engine(cfg)
    try:
        assert eng.loss_agg == "seq-mean-token-mean"
    finally:
        eng.close()
