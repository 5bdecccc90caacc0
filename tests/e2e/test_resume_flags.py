"""`populora train --resume` flags: contradictions refused in one line, checkpoint paths, branch copies.

The run folders here are built by hand (config.yaml, checkpoint folders with a state.json, three logs), as
`populora train` lays them out; nothing trains, so each test takes milliseconds, except the last one, which
resumes a copy of the shared trained run (a damaged folder: a run folder is data, issue 50). The trained path
(Ctrl-C, resume, branch matching an uninterrupted run) is tests/e2e/test_kill_resume.py."""

import hashlib
import json
import os
import shutil

import pytest
from typer.testing import CliRunner

from populora.cli import app
from populora.diagnostics.sinks import read_jsonl
from populora.experiment.runs import RunSpec, interrupted_line
from populora.train.errors import TrainError
from populora.train.interrupt import TrainingInterrupted
from populora.train.resume import ResumePlan, branch_run, plan_resume, resume_line


@pytest.fixture
def run(tmp_path):
    """A run folder of 4 steps with checkpoints after steps 2 and 4."""
    r = tmp_path / "run"
    (r / "checkpoints").mkdir(parents=True)
    (r / "config.yaml").write_text("train:\n  steps: 4\n")
    for s in (2, 4):
        d = r / "checkpoints" / f"step_{s:06d}"
        (d / "adapters" / "T0").mkdir(parents=True)
        (d / "state.json").write_text(json.dumps({"step": s}))
        (d / "adapters" / "T0" / "adapter_model.safetensors").write_bytes(b"w" * s)
    for name in ("metrics.jsonl", "problems.jsonl", "events.jsonl"):
        (r / name).write_text("".join(json.dumps({"step": s, "f": name}) + "\n" for s in range(1, 5)))
    return r


def _digest(folder):
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _error(fn, *args):
    with pytest.raises(TrainError) as info:
        fn(*args)
    msg = str(info.value)
    assert "\n" not in msg
    return msg


def test_plain_resume_and_same_run_dir(run):
    assert plan_resume(run) == ResumePlan(run)
    assert plan_resume(run, run_dir=run / ".." / "run") == ResumePlan(
        run
    )  # the same folder spelled otherwise


def test_contradictions_are_refused(run, tmp_path):
    other = tmp_path / "other"
    msg = _error(plan_resume, run, other)
    assert f"--resume {run} continues that run in place, not in --run-dir {other}" in msg
    assert f"--from-checkpoint latest --run-dir {other}" in msg
    msg = _error(plan_resume, run, None, None, "paper-7b")
    assert msg.startswith("--preset paper-7b with --resume: a resumed run keeps its own config")
    assert "train.steps" in msg  # names what --set may still change
    # an older checkpoint in place would drop steps 3-4: point at the branch command instead
    msg = _error(plan_resume, run, None, "step_000002")
    assert f"populora train --resume {run} --from-checkpoint step_000002 --run-dir NEW" in msg
    assert "(there: step_000002, step_000004)" in _error(plan_resume, run, other, "7")
    assert "is the run being branched" in _error(plan_resume, run, run, "2")
    other.mkdir()
    (other / "x").write_text("")
    assert "not an empty folder" in _error(plan_resume, run, other, "2")


def test_checkpoint_paths(run, tmp_path):
    newest = run / "checkpoints" / "step_000004"
    assert plan_resume(newest) == ResumePlan(run)  # the newest checkpoint: the run itself
    assert plan_resume(run, None, "latest") == ResumePlan(run)
    older = run / "checkpoints" / "step_000002"
    assert "--from-checkpoint step_000002 --run-dir NEW" in _error(plan_resume, older)
    assert plan_resume(older, tmp_path / "new") == ResumePlan(tmp_path / "new", branch_from=(run, 2))
    assert plan_resume(run, tmp_path / "new", "2") == ResumePlan(tmp_path / "new", branch_from=(run, 2))
    # a folder inside the run that is not a checkpoint: point at the run folder
    assert f"inside the run folder {run}: pass --resume {run}" in _error(plan_resume, run / "checkpoints")


def test_branch_copies_up_to_the_checkpoint_and_leaves_the_run_alone(run, tmp_path):
    before = _digest(run)
    new = tmp_path / "branches" / "b"
    assert branch_run(run, 2, new) == new
    assert _digest(run) == before
    assert sorted(p.name for p in (new / "checkpoints").iterdir()) == ["step_000002"]
    assert (new / "checkpoints/step_000002/adapters/T0/adapter_model.safetensors").read_bytes() == b"ww"
    for name in ("metrics.jsonl", "problems.jsonl", "events.jsonl"):
        assert [r["step"] for r in read_jsonl(new / name)] == [1, 2]
    assert (new / "config.yaml").read_text() == (run / "config.yaml").read_text()
    assert not [p for p in new.parent.iterdir() if p.name.startswith(".")]  # no temp folder left


def test_resume_line():
    plan = ResumePlan("r")
    assert resume_line("r", 20, 30, plan) == "resuming r from checkpoint step_000020 (step 20 of 30)"
    branch = ResumePlan("n", branch_from=("r", 10))
    assert resume_line("n", 10, 30, branch) == (
        "branched r at step_000010 into n; resuming n from checkpoint step_000010 (step 10 of 30)"
    )


def test_cli_refuses_preset_and_from_checkpoint_alone(run):
    res = CliRunner().invoke(app, ["train", "--resume", str(run), "--preset", "smol"])
    assert res.exit_code == 2
    assert res.output.startswith("error: --preset smol with --resume") and res.output.count("\n") == 1
    res = CliRunner().invoke(app, ["train", "--from-checkpoint", "2"])
    assert res.exit_code == 2 and "--from-checkpoint needs --resume RUN" in res.output


def test_interrupt_messages(tmp_path):
    err = TrainingInterrupted(tmp_path / "r", 7, 30)
    assert str(err) == (
        f"interrupted: checkpoint checkpoints/step_000007 saved after step 7 of 30; "
        f"continue with `populora train --resume {tmp_path / 'r'}`"
    )
    assert isinstance(err, KeyboardInterrupt)
    specs = [RunSpec(n, "tiny", [], tmp_path / n) for n in ("a", "b", "c")]
    line = interrupted_line(specs, 2, err)
    assert line.startswith("[2/3] interrupted during b: 1 of 3 runs finished, b has a checkpoint at step 7;")
    assert "give the same command again" in line
    assert "no checkpoint yet" in interrupted_line(specs, 3, KeyboardInterrupt())


def test_branch_refuses_a_linked_log(run, tmp_path):
    """A branch copies the logs as data: a log that is a link (to a private file, say) is refused, not read."""
    secret = tmp_path / "secret.jsonl"
    secret.write_text(json.dumps({"step": 1, "token": "hunter2"}) + "\n")
    (run / "events.jsonl").unlink()
    (run / "events.jsonl").symlink_to(secret)
    msg = _error(branch_run, run, 2, tmp_path / "new")
    assert "events.jsonl is a symbolic link, not a regular file" in msg
    assert not (tmp_path / "new").exists()


@pytest.mark.timeout(900)  # a FIFO read blocked forever before issue 50: fail, do not hang
def test_resume_of_a_damaged_folder_falls_back_and_counts_corrupt_lines(two_step_run, tmp_path):
    """rng.json of the newest checkpoint is a FIFO (hung --resume), problems.jsonl has a `{"step": null}` line
    (a traceback) and metrics.jsonl a line that is not JSON (dropped silently): the resume falls back to the
    older checkpoint with one warning line, says how many lines it dropped from which file, and finishes."""
    run = tmp_path / "copy"
    shutil.copytree(two_step_run, run)
    rng = run / "checkpoints" / "step_000002" / "rng.json"
    rng.unlink()
    os.mkfifo(rng)
    with open(run / "problems.jsonl", "a") as fh:
        fh.write('{"step": null}\n')
    with open(run / "metrics.jsonl", "a") as fh:
        fh.write("not json\n")
    res = CliRunner().invoke(app, ["train", "-q", "--resume", str(run), "--set", "train.steps=3"])
    assert res.exit_code == 0, res.output
    warn = [ln for ln in res.stderr.splitlines() if ln.startswith("warning:")]
    assert any(
        "step_000002: rng.json is not a regular file" in w and "from step_000001" in w for w in warn
    ), warn
    dropped = [w for w in warn if "dropped corrupt lines" in w]
    assert len(dropped) == 1 and "1 from metrics.jsonl, 1 from problems.jsonl" in dropped[0], warn
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl")] == [1, 2, 3]
    assert all(type(r.get("step")) is int for r in read_jsonl(run / "problems.jsonl"))
