"""`populora experiment control rl`: RL of one student without teachers, restricted to some task types and
probed on the graded sets, on the problems of the generator the model was pretrained on; arms real, shuffled and
no update on the same stream; held-out greedy and sampled pass@1; resumable."""

import json

import pytest

from populora.config import load_config
from populora.engine import resolve_model
from populora.experiment import controls
from populora.experiment.controlled import rl as control_rl
from populora.experiment.controls import rl_step
from populora.train.setup import build_engine, graded_seed_levels, synthetic_seeds

QUICK = ["--quick", "--types", "code_f", "--probe-set", "graded", "--probe-levels", "1", "--threads", "1"]


def test_a_code_f_run_measures_every_arm_on_the_models_generator_and_resumes(model_name, tmp_path, capsys):
    out = tmp_path / "rl.json"
    control_rl.main([*QUICK, "--model", model_name, "--probe-every", "1", "--out", str(out)])
    rec = json.loads(out.read_text())
    assert [p["step"] for p in rec["runs"]["fresh/0.003/real/0"]["probes"]] == [
        1
    ]  # step 2 is the end reading
    assert sorted(rec["runs"]) == ["fresh/0.003/none/0", "fresh/0.003/real/0", "fresh/0.003/shuffled/0"]
    assert set(rec["headroom"]) == {"code_f"}
    base = rec["base"]
    assert set(base["sampled"]) == {"1", "0.6"} and set(base["greedy"]) == {"code_f"}
    assert all(0 <= c <= 2 for c in base["sampled"]["1"]["code_f"])  # 2 samples per item with --quick
    for arm, r in ((r["arm"], r) for r in rec["runs"].values()):
        assert [set(s) for s in r["solve_rate_by_type"]] == [{"code_f"}] * r["steps"]
        assert (r["end"] is None) == (arm == "none")  # no update: its held-out reading is the base's
    # the same rollout seeds in every arm: the first step (before any update) solves alike
    assert len({r["solve_rate"][0] for r in rec["runs"].values()}) == 1
    held = rec["summary"]["held_out"]["fresh lr 0.003"]
    assert set(held) == {"greedy", "1", "0.6"}
    assert {"change", "real_minus_shuffled", "real_minus_base_best_temperature"} <= set(held["1"]["all"])
    assert held["greedy"]["code_f"]["change"]["none"]["mean"] == 0
    levels = graded_seed_levels(resolve_model(model_name))
    assert rec["problem_levels"] == (list(levels) if levels else None)
    if model_name == "tiny":  # the bundled asset v2: the trainer's seed levels
        assert rec["problem_levels"] == [1, 1, 2, 2, 3, 4, 5]
    capsys.readouterr()
    # the same command again runs nothing; other settings refuse, naming them
    control_rl.main([*QUICK, "--model", model_name, "--out", str(out)])
    assert "3 runs done, 0 to run" in capsys.readouterr().out
    with pytest.raises(SystemExit, match=r"other settings \(overrides: \[\] there, \['rl.rollouts=4'\] now"):
        control_rl.main([*QUICK, "--model", model_name, "--out", str(out), "--set", "rl.rollouts=4"])
    # another loss setting on the same base: its measurement is taken over, not measured again
    other = tmp_path / "role_task.json"
    argv = [*QUICK, "--model", model_name, "--arms", "real", "--set", "rl.loss_norm=role_task"]
    control_rl.main([*argv, "--base-from", str(out), "--out", str(other)])
    taken = json.loads(other.read_text())
    assert (
        taken["base"] == rec["base"]
        and taken["base_from"] == str(out)
        and list(taken["runs"]) == ["fresh/0.003/real/0"]
    )
    with pytest.raises(
        SystemExit, match=r"--base-from .*eval_temperatures: \[1.0, 0.6\] there, \[1.0\] here"
    ):
        control_rl.main(
            [*argv, "--eval-temperatures", "1", "--base-from", str(out), "--out", str(tmp_path / "x")]
        )


def test_the_arms_differ_only_in_what_reaches_the_update(model_name, sandbox, monkeypatch):
    cfg = load_config(
        "tiny-learn", ["population.teachers=1", "population.students=1", f"model.name={model_name}"]
    )
    pool = synthetic_seeds(6, sandbox, seed=7)
    problems = [next(p for p in pool if p.task == t) for t in ("code_i", "code_o")]
    seen = []
    real_baseline = controls.reinforce_pp_baseline
    monkeypatch.setattr(
        controls,
        "reinforce_pp_baseline",
        lambda rewards, *a: (seen.append(rewards.tolist()), real_baseline(rewards, *a))[1],
    )
    eng = build_engine(cfg)
    trained = []
    monkeypatch.setattr(eng, "train_step", lambda batch: trained.append(batch.rows) or {})
    try:
        import random

        rate = rl_step(eng, problems, 4, 1.0, 5, sandbox, loss_by_task=True)
        assert rl_step(eng, problems, 4, 1.0, 5, sandbox, rewards_order=random.Random(3)) == rate
        assert rl_step(eng, problems, 4, 1.0, 5, sandbox, update=False) == rate  # the same stream, read alike
    finally:
        eng.close()
    assert len(seen) == 2 and len(trained) == 2  # no update: neither advantages nor a train step
    assert sorted(seen[1]) == sorted(seen[0])  # shuffled: the same rewards, another order
    assert [r.loss_group for r in trained[0]] == [p.task for p in problems for _ in range(4)][
        : len(trained[0])
    ]
    assert {r.loss_group for r in trained[1]} == {""}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--types", "code_x"], "--types: unknown task type(s) code_x"),
        (["--probe-set", "fixed", "--probe-levels", "1"], "--probe-levels needs --probe-set graded"),
        (["--probe-levels", "7"], "--probe-levels: bad level '7': levels are 1..5"),
        (["--probe-levels", "one"], "--probe-levels: bad level 'one': expected N"),
        (["--arms", "real,random"], "--arms: real,random: pick from real, shuffled, none"),
        (["--eval-temperatures", "1,0"], "--eval-temperatures: expected numbers > 0"),
        (["--probe-every", "-1"], "--probe-every must be >= 0"),
        (["--probe-set", "flaws", "--flaw-per-class", "65"], "--flaw-per-class must be in [1, 64]"),
        (["--set", "rl.loss_norm=by_task"], "--set: rl.loss_norm"),
    ],
)
def test_bad_options_are_named(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        control_rl.main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_the_up_front_estimate_by_hand():
    from populora.experiment.controlled.rl_measure import estimate_seconds

    # code_i alone: 2 trained runs of 30 steps x 16 problems x 8 rollouts at 0.055 s, each with 2210 held-out
    # answers at 0.04 s, and one no-update run of the same stream at 0.02 s a rollout
    runs = [("fresh", "real"), ("fresh", "shuffled"), ("fresh", "none")]
    got = estimate_seconds(runs, {"fresh": 30, "fixed": 20}, 16, 8, 2210, ["code_i"])
    assert got == pytest.approx(2 * (3840 * 0.055 + 2210 * 0.04) + 3840 * 0.02)
    # code_o and code_i, one trained run of 10 fixed steps x 2 problems each x 4 rollouts, 100 answers per type
    got = estimate_seconds([("fixed", "real")], {"fresh": 30, "fixed": 10}, 2, 4, 100, ["code_i", "code_o"])
    assert got == pytest.approx(10 * 8 * (0.055 + 0.17) + 100 * (0.04 + 0.14))


def test_a_long_control_says_so_before_it_starts_and_a_quick_one_does_not():
    full = control_rl.parse(["--types", "code_i", "--per-type", "16"])
    todo = [("fresh", 3e-3, arm, seed) for seed in range(3) for arm in ("real", "shuffled", "none")]
    line = control_rl.up_front_line(full, todo, measure_base=True)
    assert line is not None and line.startswith("this will take about ") and "continues" in line
    quick = control_rl.parse(["--quick"])
    assert control_rl.up_front_line(quick, [("fresh", 3e-3, "real", 0)], measure_base=True) is None


def test_the_flaws_probe_reads_each_planted_class_flawed_and_unflawed(model_name, tmp_path):
    out = tmp_path / "flaws.json"
    argv = ["--quick", "--types", "code_i", "--probe-set", "flaws", "--probe-levels", "1", "--threads", "1"]
    argv += ["--problems", "mixed"]
    control_rl.main([*argv, "--model", model_name, "--arms", "real,shuffled", "--out", str(out)])
    rec = json.loads(out.read_text())
    assert rec["settings"]["problems"] == "mixed" and rec["settings"]["flaw_set"] == "atoms"
    from populora.pretrain.flaws import CODE_I_CLASSES

    tags = rec["probe_tags"]["code_i"]
    # --quick: 2 items a class first, then the 4 graded items, each tagged by the class its input carries
    assert tags[: 2 * len(CODE_I_CLASSES)] == [*CODE_I_CLASSES, *CODE_I_CLASSES]
    assert len(tags) == 2 * len(CODE_I_CLASSES) + 4 and len(rec["base"]["greedy"]["code_i"]) == len(tags)
    assert all(x == "unflawed" or x.startswith("carries:") for x in tags[2 * len(CODE_I_CLASSES) :])
    held = rec["summary"]["held_out"]["fresh lr 0.003"]["greedy"]
    assert {f"code_i/{c}" for c in CODE_I_CLASSES} | {"code_i", "all", "flawed"} <= set(held)
    assert "real_minus_shuffled" in held["flawed"]
    assert ("unflawed" in held) == ("unflawed" in tags)


def test_summary_rows_pool_the_tagged_items_by_hand():
    from populora.experiment.controlled.rl_measure import item_groups, item_scores

    tags = {"code_o": ["mod_as_quotient", "unflawed", "mod_as_quotient", "several"], "code_i": ["unflawed"]}
    groups = item_groups(["code_o", "code_i"], tags)
    assert groups["code_o/mod_as_quotient"] == {"code_o": [0, 2]}
    assert groups["flawed"] == {"code_o": [0, 2]} and groups["unflawed"] == {"code_o": [1], "code_i": [0]}
    assert set(item_groups(["code_o"])) == {"code_o", "all"}  # untagged: per type and all, as before
    m = {
        "greedy": {"code_o": [1, 0, 0, 1], "code_i": [1]},
        "sampled": {"1": {"code_o": [2, 4, 0, 1], "code_i": [3]}},
    }
    assert list(item_scores(m, "greedy", 4, groups["unflawed"])) == [0.0, 1.0]
    assert list(item_scores(m, "1", 4, groups["code_o/mod_as_quotient"])) == [0.5, 0.0]
    assert list(item_scores(m, "1", 4, ["code_i", "code_o"])) == [0.75, 0.5, 1.0, 0.0, 0.25]


def test_the_stream_mixes_atoms_and_graded_problems_of_the_train_split(sandbox):
    from populora.pretrain.graded import graded_split

    args = control_rl.parse(["--types", "code_o,code_f", "--problems", "mixed"])
    pool = control_rl.stream_pool(args, 6, sandbox, 0, (1, 2))
    one_line = [p.program.count("\n") == 2 and "return" in p.program.splitlines()[2] for p in pool["code_o"]]
    assert len(pool["code_o"]) == 6 and one_line[::2] == [True] * 3  # atom, graded, atom, graded, ...
    assert all(graded_split(p.program) == "train" for p in pool["code_o"] + pool["code_f"])
    assert len(pool["code_f"]) >= 6  # code_f has no atoms: graded only
    args.problems = "atoms"
    assert all(
        p.program.count("\n") == 2 for p in control_rl.stream_pool(args, 4, sandbox, 0, (1,))["code_o"]
    )
