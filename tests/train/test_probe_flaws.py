"""The misconception probe during training (`diagnostics.probe_flaws`, train/probe_flaws.py): right and
misconceived rates per planted class from real parsing, its place in metrics.jsonl, probe_items.jsonl and the
report of a real run."""

import json

import pytest

from populora import tasks
from populora.config import ConfigError, load_config, to_yaml
from populora.diagnostics.probe import flaw_curves
from populora.diagnostics.run import load_run
from populora.diagnostics.schema import check_run
from populora.engine import Generation, build
from populora.engine.testing import random_model
from populora.pretrain.flaw_probe_sets import flaw_probe_selection
from populora.pretrain.flaws import CLASSES, CODE_I_CLASSES
from populora.report.html import render_report
from populora.train.probe import ProbeScores
from populora.train.probe_flaws import flaw_readings, repaired_classes
from populora.train.records import ProposalTrace, problem_records
from populora.train.trainer import Trainer


def test_readings_count_right_and_misconceived_answers_per_class():
    problems, classes, wrong = flaw_probe_selection(2, ["code_o"])
    t = tasks.get("code_o")
    ps = problems["code_o"]
    texts = {}
    verdicts = []
    for i, p in enumerate(ps):
        # item k: right when k % 3 == 0, the misconceived answer when k % 3 == 1, unparseable otherwise
        kind = i % 3
        texts["free", "code_o", i, "S0"] = (
            t.render_answer(p.outputs[0])
            if kind == 0
            else t.render_answer(wrong["code_o"][i])
            if kind == 1
            else "??"
        )
        verdicts.append(int(kind == 0))
    scores = ProbeScores(["S0"], problems, correct={"free": {"S0": {"code_o": verdicts}}}, texts=texts)
    readings, items = flaw_readings(scores, classes, wrong)
    assert set(readings["S0"]["code_o"]) == set(CLASSES)
    for c, row in readings["S0"]["code_o"].items():
        idx = [i for i, x in enumerate(classes["code_o"]) if x == c]  # 2 items a class, interleaved
        assert row["right"] == sum(i % 3 == 0 for i in idx) / 2
        assert row["misconceived"] == sum(i % 3 == 1 for i in idx) / 2
    assert items["misconceived"]["S0"]["code_o"] == [int(i % 3 == 1) for i in range(len(ps))]
    assert items["class"]["code_o"] == classes["code_o"]
    fixed = {"code_o": {"a": {"right": 0.75, "misconceived": 0.0}, "b": {"right": 0.5, "misconceived": 0.5}}}
    assert repaired_classes(fixed) == ["code_o/a"]  # 50% is not yet repaired


def test_a_run_logs_the_misconception_probe_per_class(tmp_path):
    with pytest.raises(ConfigError, match="diagnostics.probe_flaws"):
        load_config("tiny", ["diagnostics.probe_flaws=65"])
    overrides = [
        *("population.teachers=1", "population.students=1", "tasks.prompts=3", "tasks.seed_synthetic=2"),
        *("tasks.teacher_max_new_tokens=8", "tasks.student_max_new_tokens=8", "sandbox.workers=1"),
        *("train.steps=1", "train.checkpoint_every=1", "evolution.every=0", "rl.rollouts=2"),
        *("diagnostics.probe_every=1", "diagnostics.probe_size=2", "diagnostics.probe_proposals=0"),
        "diagnostics.probe_flaws=1",
        "diagnostics.flaw_coverage=true",
    ]
    cfg = load_config("tiny", overrides)
    model, tok = random_model(seed=3)
    tr = Trainer(
        cfg, tmp_path / "run", engine=build(model=model, tokenizer=tok, n_slots=2, rank=4), quiet=True
    )
    tr.prober.budget = dict.fromkeys(tr.prober.budget, 4)  # a random model: short answers keep it quick
    tr.setup()
    tr.run.write_config(to_yaml(cfg))
    try:
        # the validation phase reads the classes of valid code_o / code_i proposals in the sandbox
        t = tasks.get("code_o")
        ranged = "def f(n):\n    return list(range(n))"
        traces = [
            ProposalTrace(
                "T0", "S1", "code_o", gen=Generation([1], t.render_proposal(ranged, ["2"]), [0.0], "stop")
            ),
            ProposalTrace("T0", "S1", "code_o", gen=Generation([1], "no proposal", [0.0], "stop")),
        ]
        tr.validate(traces, 1)
        assert traces[0].valid and traces[0].flaws == ("range_end_inclusive",)
        assert not traces[1].valid and traces[1].flaws is None
        lines = problem_records(1, traces)
        assert lines[0]["flaws"] == ["range_end_inclusive"] and "flaws" not in lines[1]
        tr.fit(0)
    finally:
        tr.close()
    run_dir = tmp_path / "run"
    recs = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    items = [json.loads(x) for x in (run_dir / "probe_items.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs] == [0, 1]
    for rec, line in zip(recs, items, strict=True):
        assert set(rec["probe_flaws"]) == set(rec["probe"])  # every member the greedy probe reads
        for by_task in rec["probe_flaws"].values():
            assert set(by_task["code_o"]) == set(CLASSES) and set(by_task["code_i"]) == set(CODE_I_CLASSES)
        assert line["flaws"]["class"]["code_i"] == list(CODE_I_CLASSES)  # one item a class
    assert check_run(run_dir) == []
    bad = dict(
        recs[1], probe_flaws={"S0": {"code_o": {"no_such_class": {"right": 0.0, "misconceived": 0.0}}}}
    )
    from populora.diagnostics.schema import check_metrics_record

    assert any("must be a planted class" in e for e in check_metrics_record(bad))
    for rec in recs[1:]:  # every teacher's valid proposals per class (zeros kept), when it had any read
        for m in rec["members"].values():
            assert "flaws" not in m or set(m["flaws"]) == set(CLASSES)
    run = load_run(run_dir)
    curves = flaw_curves(run)
    assert list(curves["code_o"]["mod_as_quotient"][0]) == [0, 1]
    page = render_report(run)
    card = page[page.index('id="probe_flaws"') :]
    card = card[: card.index("</section>")]
    assert "<img" in card and "misconception probe" in card
