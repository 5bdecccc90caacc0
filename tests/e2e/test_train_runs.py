"""End-to-end training on the tiny model: population with evolution and resume, single mode, determinism."""

import pytest

from populora.diagnostics.schema import PHASES, check_run
from populora.diagnostics.sinks import read_jsonl
from populora.lora.peft_io import load_peft
from populora.train.checkpoint import list_checkpoints, read_state
from populora.train.launch import train

TIMING = {"time", "phase_s", "step_s", "tokens_per_s", "overlap_s"}


def _stable(rec: dict) -> dict:
    return {k: v for k, v in rec.items() if k not in TIMING}


def _events(run):
    return [
        {k: v for k, v in e.items() if k != "seconds"}
        for e in read_jsonl(run / "events.jsonl")
        if e["type"] in ("matchup", "evolution")
    ]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, fast):
    """Run A: 3 steps straight. Run B: 2 steps, then `--resume` with train.steps=3."""
    root = tmp_path_factory.mktemp("runs")
    common = [*fast, "train.checkpoint_every=1", "evolution.every=2", "train.keep_checkpoints=0"]
    a = train("tiny", root / "a", [*common, "train.steps=3"], quiet=True)
    b = train("tiny", root / "b", [*common, "train.steps=2"], quiet=True)
    train(resume=root / "b", overrides=["train.steps=3"], quiet=True)
    return a, b


def test_population_run_folder_schema(runs):
    a, _ = runs
    assert check_run(a) == []  # every key of docs/run-folder.md, in all three logs
    metrics = read_jsonl(a / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2, 3]
    for m in metrics:
        assert set(m["phase_s"]) == set(PHASES) and m["mode"] == "population"
        assert len(m["members"]) == 4 and len(m["matchups"]) == 2
        for mid, mem in m["members"].items():
            assert mem["role"] == ("teacher" if mid.startswith("T") else "student")
            assert set(mem["solve_rate"]) == {"code_i", "code_o", "code_f", "all"}
            assert mem["mu"] is not None and mem["sigma"] > 0
        students = sorted(mu["student"] for mu in m["matchups"])
        assert students == ["S0", "S1"] or len(set(students)) == 2  # balanced: every student once
    problems = read_jsonl(a / "problems.jsonl")
    assert len(problems) == 3 * 2 * 3  # steps x teachers x prompts
    for p in problems:
        assert {
            "step",
            "proposer",
            "solver",
            "task",
            "valid",
            "reason",
            "program",
            "solve_rate",
            "features",
        } <= set(p)
        assert p["valid"] or p["reason"]


def _collisions(run, member: str, step: int) -> int:
    """The member's proposals of `step` that copied a probe program (out of the game, not in n_proposed)."""
    return sum(
        1
        for p in read_jsonl(run / "problems.jsonl")
        if p["proposer"] == member and p["step"] == step and p.get("reason") == "probe collision"
    )


def test_evolution_event_and_lineage(runs):
    a, _ = runs
    evo = [e for e in read_jsonl(a / "events.jsonl") if e["type"] == "evolution"]
    assert {e["role"] for e in evo} == {"teacher", "student"} and all(e["step"] == 2 for e in evo)
    by_role = {e["role"]: e for e in evo}
    assert by_role["teacher"]["child"] == "T2" and by_role["student"]["child"] == "S2"
    for e in evo:
        assert e["replaced"] not in e["parents"] and e["operator"] in {"M1", "M2", "M3", "M4"}
    metrics = read_jsonl(a / "metrics.jsonl")
    step2, step3 = metrics[1]["members"], metrics[2]["members"]
    # the step's metrics describe who played it: the replaced member at step 2, its child from step 3 on
    assert by_role["teacher"]["replaced"] in step2 and "T2" not in step2
    assert "T2" in step3 and by_role["teacher"]["replaced"] not in step3
    # n_proposed counts the proposals in the game: a probe collision is out of it (problems.jsonl lists it)
    replaced = by_role["teacher"]["replaced"]
    collided = _collisions(a, replaced, step=2)
    assert step2[replaced]["n_proposed"] == 3 - collided
    state = read_state(dict(list_checkpoints(a))[2])
    child = next(m for m in state["members"] if m["id"] == "T2")
    assert child["parents"] == by_role["teacher"]["parents"] and child["born_step"] == 2


def test_checkpoints_hold_peft_adapters(runs):
    a, _ = runs
    assert [s for s, _ in list_checkpoints(a)] == [1, 2, 3]
    step, path = list_checkpoints(a)[-1]
    state = read_state(path)
    assert state["step"] == 3
    for m in state["members"]:
        ad = load_peft(path / "adapters" / m["id"])
        assert ad.rank == 4
    for name in ("optimizer.safetensors", "rng.json", "buffers.jsonl"):
        assert (path / name).is_file()


def test_same_seed_and_resume_reproduce_the_metrics(runs):
    a, b = runs
    ma, mb = read_jsonl(a / "metrics.jsonl"), read_jsonl(b / "metrics.jsonl")
    assert [m["step"] for m in mb] == [1, 2, 3]  # resumed, nothing duplicated
    assert [_stable(m) for m in ma] == [_stable(m) for m in mb]
    assert _events(a) == _events(b)
    resumes = [e for e in read_jsonl(b / "events.jsonl") if e["type"] == "resume"]
    assert resumes == [{"step": 2, "type": "resume", "from": "checkpoints/step_000002"}]


def test_single_mode_with_resume(tmp_path, fast):
    sets = [*fast, "population.mode=single", "train.steps=1", "train.checkpoint_every=1", "evolution.every=1"]
    run = train("tiny", tmp_path / "single", sets, quiet=True)
    train(resume=run, overrides=["train.steps=2"], quiet=True)
    metrics = read_jsonl(run / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2]
    for m in metrics:
        assert m["mode"] == "single" and list(m["members"]) == ["A0"]
        a0 = m["members"]["A0"]
        assert a0["role"] == "single" and a0["mu"] is None and a0["sigma"] is None
        assert a0["n_proposed"] == 3 - _collisions(run, "A0", m["step"]) and a0["valid_rate"] is not None
        assert m["matchups"][0]["teacher"] == m["matchups"][0]["student"] == "A0"
    events = read_jsonl(run / "events.jsonl")
    assert not [e for e in events if e["type"] == "evolution"]  # a single agent has nobody to replace it
    assert [e["step"] for e in events if e["type"] == "resume"] == [1]
    assert {p["proposer"] for p in read_jsonl(run / "problems.jsonl")} == {"A0"}
    assert (run / "checkpoints" / "step_000002" / "adapters" / "A0" / "adapter_config.json").is_file()
