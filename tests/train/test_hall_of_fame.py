"""A hall-of-fame round in a real trainer (train/hall.py; bundled tiny model, real sandbox, real PEFT files):
it logs `hof`, freezes the base model and the best members into their own slots and files, and leaves
everything training reads untouched (ratings, PFSP's generator, buffers, coverage, the members' adapters and
optimiser state)."""

import json
import shutil

import pytest
import torch
from fast_runs import FAST as SHARED_FAST

from populora.config import load_config
from populora.diagnostics.run import load_run
from populora.diagnostics.schema import check_metrics_record
from populora.diagnostics.sinks import read_jsonl
from populora.lora.peft_io import load_peft
from populora.report import plots
from populora.report.html import render_report
from populora.train.checkpoint import list_checkpoints, read_state
from populora.train.setup import build_engine
from populora.train.trainer import Trainer

FAST = [
    *SHARED_FAST,
    "hof.every=1",
    "hof.size=1",
]


def _state(tr: Trainer) -> dict:
    """Everything of the run's state a hall round must not change."""
    members = tr.pop.ordered()
    return {
        "pop": json.dumps(tr.pop.to_dict(), sort_keys=True),
        "rng": tr.rng.getstate(),
        "buffers": {name: [p.id for p in tr.buffers[name]] for name in tr.cfg.tasks.types},
        "coverage": json.dumps(tr.coverage.state_dict(), sort_keys=True, default=str),
        "adapters": {m.id: tr.engine.get_adapter(m.slot).state_dict() for m in members},
        "optimizer": tr.engine.optimizer_state(),
    }


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


TIMING = {"time", "phase_s", "step_s", "tokens_per_s", "overlap_s"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, model_name):
    """Run A: 2 steps, a hall round after each, every round checked for side effects. Run B: A's folder
    resumed from its step-1 checkpoint (step 2's dropped), trained to step 2 again in the same engine."""
    root = tmp_path_factory.mktemp("hof")
    cfg = load_config(
        "tiny",
        [
            *FAST,
            f"model.name={model_name}",
            "train.steps=2",
            "train.checkpoint_every=1",
            "train.keep_checkpoints=0",
        ],
    )
    engine = build_engine(cfg)
    tr = Trainer(cfg, root / "a", engine=engine, quiet=True)
    untouched, played = [], tr.hof.after_step

    def checked(trainer, step, record):
        before = _state(trainer)
        played(trainer, step, record)
        untouched.append(_same(before, _state(trainer)))

    tr.hof.after_step = checked
    tr.setup()
    tr.fit()
    hall_a = tr.hof.state_dict()
    tr.close()
    shutil.copytree(root / "a", root / "b")
    shutil.rmtree(root / "b" / "checkpoints" / "step_000002")
    tb = Trainer(cfg, root / "b", engine=engine, quiet=True)
    tb.setup()
    start = tb.restore()
    restored = tb.hof.state_dict()
    tb.fit(start)
    tb.close()
    return root / "a", root / "b", untouched, hall_a, restored, engine


def test_rounds_log_hof_and_touch_no_training_state(runs):
    a, _, untouched, hall_a, _, engine = runs
    assert engine.n_slots == 4 + 1 + 2  # the members, the base model, one snapshot per role
    assert untouched == [True, True]  # unrated: no rating, draw, buffer, coverage, weight or moment moved
    metrics = read_jsonl(a / "metrics.jsonl")
    assert [err for m in metrics for err in check_metrics_record(m)] == []
    first, second = (m["hof"] for m in metrics)
    assert list(first["hall"]) == ["base"]  # the first round meets the base model only
    assert set(first["members"]) == {"T0", "T1", "S0", "S1"}
    for mid, sides in first["members"].items():
        side = "teacher" if mid.startswith("T") else "student"
        assert list(sides) == [side] and list(sides[side]["solve"]) == ["base"]
    assert first["members"]["T0"]["teacher"]["n"] == 3  # one fixed prompt per task type (auto)
    # after round 1 the best teacher and student by LCB were frozen; round 2 meets them too
    snaps = sorted(h for h in second["hall"] if h != "base")
    assert len(snaps) == 2 and snaps[0].startswith("s000001-S") and snaps[1].startswith("s000001-T")
    assert set(second["members"]["S0"]["student"]["solve"]) == {"base", snaps[1]}
    assert set(second["members"]["T0"]["teacher"]["solve"]) == {"base", snaps[0]}
    # the hall's files: the base model's exam (no adapter: it is the zero update), snapshots as PEFT folders
    exam = (a / "hall" / "base" / "exam.jsonl").read_text().splitlines()
    assert len(exam) == first["hall"]["base"]["exam"]
    assert not (a / "hall" / "base" / "adapter").exists()
    for e in hall_a[1:]:
        assert load_peft(a / "hall" / e["id"] / "adapter").rank == 4
    state = read_state(dict(list_checkpoints(a))[2])
    assert state["hall"] == hall_a and [e["step"] for e in hall_a] == [0, 2, 2]  # size 1: newest kept


def test_resume_keeps_the_hall(runs):
    a, b, _, _, restored, _ = runs
    assert [e["id"] for e in restored] == ["base", *sorted(e["id"] for e in restored[1:])]
    assert all(e["step"] in (0, 1) for e in restored)  # the hall of the step-1 checkpoint
    ma, mb = read_jsonl(a / "metrics.jsonl"), read_jsonl(b / "metrics.jsonl")
    assert [m["step"] for m in mb] == [1, 2]
    stable = [{k: v for k, v in m.items() if k not in TIMING and k != "hof"} for m in (ma[1], mb[1])]
    assert stable[0] == stable[1]
    hof = [{k: v for k, v in m["hof"].items() if k != "seconds"} for m in (ma[1], mb[1])]
    assert hof[0] == hof[1]  # the same games against the same restored hall (adapters and exams)


def test_the_report_shows_the_hall(runs, monkeypatch):
    a, *_ = runs
    # only the hall's card is drawn here (the other cards have tests of their own): the rest come out empty
    for name in dir(plots):
        if name.endswith("_figure") and not name.startswith("compare"):
            monkeypatch.setattr(plots, name, lambda *_a, **_k: None)
    html = render_report(load_run(a))
    card = html[html.index('id="hof"') :]
    card = card[: card.index("</section>")]
    assert '<img alt="Hall of fame' in card and "base model" in card and "→" in card
    assert html.count("<img") == 1


def test_off_by_default_adds_nothing(tmp_path, model_name):
    cfg = load_config("tiny", [*FAST[:-2], f"model.name={model_name}", "train.steps=1"])
    tr = Trainer(cfg, tmp_path / "run", quiet=True)
    assert not tr.hof.enabled and tr.hof.state_dict() == []
    rec = {"step": 1}
    tr.hof.after_step(tr, 1, rec)  # never due
    assert rec == {"step": 1} and not (tmp_path / "run" / "hall").exists()
    tr.close()


@pytest.mark.parametrize("bad", ["hof.every=-2", "hof.prompts=129"])
def test_bad_keys_name_themselves(bad):
    from populora.config import ConfigError

    with pytest.raises(ConfigError, match=bad.split("=")[0]):
        load_config("tiny", [bad])


def test_the_console_line_gives_the_mean_against_the_base_model():
    from populora.train.hall import hof_line

    side = {"valid": 1.0, "n": 2}
    hof = {
        "hall": {"base": {}, "s000001-T0": {}},
        "members": {
            "T0": {"teacher": {**side, "solve": {"base": 0.25}}},
            "T1": {"teacher": {**side, "solve": {"base": 0.75}}},
            "S0": {"student": {**side, "solve": {"base": None, "s000001-T0": 1.0}}},
        },
        "seconds": 2.04,
    }
    assert hof_line(3, hof) == (
        "hall of fame at step 3: the base model solves the teachers' problems 0.50, "
        "the students solve its exam - (2 in the hall, 2.0s)"
    )
